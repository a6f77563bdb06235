"""Sorting, top-k and scans (cumsum, cumprod, ...)."""
