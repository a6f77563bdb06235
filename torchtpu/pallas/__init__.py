"""Hand-written Pallas kernels, used on TPU/GPU where they beat XLA's own
fusion; each has an XLA reference in torchtpu/ops/lowerings/ that tests
compare it with (in interpret mode on the CPU)."""
