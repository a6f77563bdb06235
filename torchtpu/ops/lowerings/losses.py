"""Loss functions (nll, mse, bce, ...) and their backward ops."""
