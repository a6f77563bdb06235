"""Convolutions (every rank, transposed) and their backward."""
