"""Ops whose output shape depends on the data (nonzero, masked_select, unique, boolean indexing): they synchronise, as on CUDA."""
