"""Eager execution of aten ops on `tpu`: dispatch, view plans, lowerings."""
