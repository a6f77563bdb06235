"""Random ops driven by the device generator (seed, offset): uniform_, normal_, bernoulli, randint, randperm, ..."""
