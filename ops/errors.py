"""Error base classes of rudnn: every family raises a subclass of `RudnnError`."""
from __future__ import annotations


class RudnnError(ValueError):
    """Bad input to a rudnn operator: the message names the argument, what it got and what it needs."""
