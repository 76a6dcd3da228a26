"""docs/debugging.md runs as written: its Python blocks, in order, in one namespace (a
later block uses what an earlier one defined), on the CPU runtime."""
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.feature("docs+examples")


def test_debugging_guide_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "debugging.md").read_text(), re.S)
    assert len(blocks) >= 4
    monkeypatch.delenv("KERNELDSL_BOUNDS_CHECK", raising=False)
    monkeypatch.delenv("KERNELDSL_GUARD", raising=False)  # (the guide turns it on and off: restored after)
    script = tmp_path / "debugging_guide.py"
    script.write_text("\n".join(blocks))
    ns = runpy.run_path(str(script))
    assert ns["info"]["memory_entries"] >= 1
