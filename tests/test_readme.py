"""The README's tour runs as written (and the examples run), so the docs cannot rot."""
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.feature("docs+examples")


def test_readme_tour_runs(tmp_path, capsys):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## A tour\s+```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "tour.py"
    script.write_text(block)
    ns = runpy.run_path(str(script))
    np.testing.assert_allclose(ns["out"].numpy(), ns["x"].numpy().max(1))


DOC_BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "operators.md").read_text(), re.S)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_operator_guide_runs(tmp_path, index):
    """Every Python block of docs/operators.md runs as written (each ends in an assert)."""
    script = tmp_path / f"block{index}.py"
    script.write_text(DOC_BLOCKS[index])
    runpy.run_path(str(script))


@pytest.mark.parametrize("example", ["quickstart.py", "custom_kernel.py", "group_gemm.py", "pooling.py"])
def test_examples_run(example):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / example)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
