"""The package version, in a module of its own so that modules keying caches on it
(`cache.py`) need not import the package's `__init__`, which imports them."""

__version__ = "0.1.0"
