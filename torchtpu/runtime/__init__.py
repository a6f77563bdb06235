"""The runtime under the dispatcher: JAX devices, dtypes and the box table."""
