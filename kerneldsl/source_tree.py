"""Python started in a source checkout imports kerneldsl/ from the checkout, even where a
non-editable install exists; there `kerneldsl.backends` is the sibling folder backends/
(installs map it under kerneldsl/, pyproject.toml and setup.py say how). Importing this
module points `kerneldsl.backends` at that folder when kerneldsl/ has none of its own."""
from __future__ import annotations

import importlib.util
import os
import sys


def register_sibling_backends() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(os.path.join(here, "backends")) or "kerneldsl.backends" in sys.modules:
        return
    sibling = os.path.join(os.path.dirname(here), "backends")
    init = os.path.join(sibling, "__init__.py")
    if not os.path.isfile(init):
        return
    spec = importlib.util.spec_from_file_location("kerneldsl.backends", init, submodule_search_locations=[sibling])
    module = importlib.util.module_from_spec(spec)
    sys.modules["kerneldsl.backends"] = module
    spec.loader.exec_module(module)


register_sibling_backends()
