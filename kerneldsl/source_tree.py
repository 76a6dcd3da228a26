"""Python started in a source checkout imports kerneldsl/ from the checkout, even where a
non-editable install exists; there `kerneldsl.backends` is the sibling folder backends/
(installs map it under kerneldsl/; pyproject.toml and setup.py say how). Importing this
module installs a finder that resolves `kerneldsl.backends` to that folder, on first use,
when kerneldsl/ has none of its own."""
from __future__ import annotations

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_SIBLING = os.path.join(os.path.dirname(_HERE), "backends")


class SiblingBackendsFinder:
    """A meta path finder (the protocol needs only `find_spec`; importlib.abc costs 30 ms
    to import) for the package `kerneldsl.backends` in the checkout's backends/ folder."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "kerneldsl.backends":
            return None
        return importlib.util.spec_from_file_location(fullname, os.path.join(_SIBLING, "__init__.py"),
                                                      submodule_search_locations=[_SIBLING])


def install() -> None:
    if os.path.isdir(os.path.join(_HERE, "backends")) or not os.path.isfile(os.path.join(_SIBLING, "__init__.py")):
        return
    if not any(isinstance(f, SiblingBackendsFinder) for f in sys.meta_path):
        sys.meta_path.append(SiblingBackendsFinder())  # after the editable-install finders, if any


install()
