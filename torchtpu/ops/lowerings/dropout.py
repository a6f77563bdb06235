"""native_dropout and its backward."""
