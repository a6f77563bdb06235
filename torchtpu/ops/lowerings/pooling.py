"""Pooling: max/avg (with indices and backward), adaptive."""
