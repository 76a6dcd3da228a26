"""Checks what a user installs: run with the python of a fresh venv holding only the built
wheel, from a folder outside the checkout.

    python installed_check.py CHECKOUT

1. `kerneldsl`, `kerneldsl.backends.*` and every `rudnn` family import from site-packages;
2. every example runs (on the default cpu runtime) from a copy outside the checkout and
   prints "ok" last; every operator family is called by at least one example, so a family
   shipped without one fails here;
3. Python started in the checkout root (whose kerneldsl/ folder shadows the installed one)
   still imports kerneldsl with its back ends.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def fail(msg: str) -> None:
    print(f"installed_check: FAILED: {msg}")
    sys.exit(1)


def main(checkout: Path) -> None:
    import kerneldsl
    import rudnn
    for mod in (kerneldsl, rudnn):
        if Path(mod.__file__).resolve().is_relative_to(checkout):
            fail(f"{mod.__name__} was imported from the checkout ({mod.__file__}), not from the install")
    for kind in ("cpu", "opencl", "cuda"):
        importlib.import_module(f"kerneldsl.backends.{kind}")
    families = sorted(m.name for m in pkgutil.iter_modules(rudnn.__path__) if m.ispkg)
    for fam in families:
        importlib.import_module(f"rudnn.{fam}")
    print(f"installed_check: kerneldsl {kerneldsl.__version__}, families {', '.join(families)}")

    with tempfile.TemporaryDirectory() as tmp:
        examples = Path(tmp) / "examples"
        shutil.copytree(checkout / "examples", examples)
        called = set()
        # test_*.py files are pytest files for users to copy (the suite runs them), not scripts
        for script in sorted(p for p in examples.glob("*.py") if not p.name.startswith("test_")):
            text = script.read_text()
            named = re.findall(r"\brudnn\.(\w+)", text) + re.findall(r"\bfrom rudnn import ([\w, ]+)", text)
            called |= {w.strip() for n in named for w in n.split(",")} & set(families)
            out = subprocess.run([sys.executable, str(script)], cwd=tmp, capture_output=True, text=True, timeout=900)
            last = out.stdout.strip().splitlines()[-1:] or [""]
            if out.returncode != 0 or not last[0].endswith("ok"):
                fail(f"examples/{script.name} (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
            print(f"installed_check: examples/{script.name} ok")
        missing = sorted(set(families) - called)
        if missing:
            fail(f"no example calls the operator families {missing}: each family needs one (docs/families.md)")

    probe = ("import kerneldsl, kerneldsl.backends.cpu.runtime, numpy as np; "
             "t = kerneldsl.runtime('cpu').tensor(np.ones(3, np.float32)); print(t.numpy().sum())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=checkout, capture_output=True, text=True, timeout=300)
    if out.returncode != 0 or out.stdout.strip() != "3.0":
        fail(f"import kerneldsl from the checkout root after an install:\n{out.stderr[-3000:]}")
    print("installed_check: import kerneldsl from the checkout root ok")
    print("installed_check: passed")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
