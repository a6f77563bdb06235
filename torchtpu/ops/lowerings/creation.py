"""Factory ops: arange, full, eye, linspace, scalar_tensor, ..."""
