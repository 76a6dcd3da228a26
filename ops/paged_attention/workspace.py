"""`SplitWorkspace`: the F32 scratch of the split path, [queries, heads, splits, value_dim + 2]
(each split's unnormalised output, then its running max and sum), reusable across calls
of matching shape on one runtime."""
from __future__ import annotations

import kerneldsl as kd

from .problem import CHECKS

MAX_WORKSPACE_BYTES = 64 << 20
_CHECK = CHECKS.at("SplitWorkspace")


class SplitWorkspace:
    """Scratch for `attention_with_workspace` / `mla_with_workspace` with `splits` splits."""

    def __init__(self, like: kd.Tensor, queries: int, heads: int, value_dim: int, splits: int):
        _CHECK.tensor("like", like)
        self.queries = _CHECK.integer("queries", queries, low=0)
        self.heads = _CHECK.integer("heads", heads, low=1)
        self.value_dim = _CHECK.integer("value_dim", value_dim, low=1, high=1024)
        self.splits = _CHECK.integer("splits", splits, low=2, high=32)
        shape = (self.queries, self.heads, self.splits, self.value_dim + 2)
        nbytes = 4 * self.queries * self.heads * self.splits * (self.value_dim + 2)
        if nbytes > MAX_WORKSPACE_BYTES:
            _CHECK.fail(f"the workspace F32 {list(shape)} needs {nbytes} bytes, more than the 64 MiB allowed: "
                        f"use fewer splits or fewer queries per call")
        self.tensor = like.runtime.empty(shape, "f32")

    @property
    def runtime(self):
        return self.tensor.runtime

    def __repr__(self) -> str:
        return (f"SplitWorkspace(queries={self.queries}, heads={self.heads}, value_dim={self.value_dim}, "
                f"splits={self.splits})")
