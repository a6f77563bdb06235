"""Indexing and scatter families: index_select, gather, scatter, index, index_put, masked_fill, ..."""
