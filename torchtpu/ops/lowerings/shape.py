"""Shape ops that produce new data: cat, flip, roll, tril/triu, pad, repeat, ..."""
