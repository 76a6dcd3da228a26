"""The interpreter: kernels run as Python over numpy, for debugging (see docs/debugging.md)."""
