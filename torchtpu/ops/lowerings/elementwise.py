"""Pointwise math, comparisons, logical/bitwise ops, where/clamp, with torch's type promotion."""
