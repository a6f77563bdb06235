"""batch_norm, layer_norm, group_norm and their backward ops."""
