"""embedding and its backward."""
