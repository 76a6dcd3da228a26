"""Runs one cube: each unit is a generator (the rendered kernel) resumed one at a time, in unit
order, until it finishes or reaches a split point. A plane operation or fragment operation
completes once every lane of the unit's plane has reached it (a plane operation then orders the
plane's shared-memory accesses); a barrier once every unit of the
cube has. Units that do not all meet at the same split point are an error naming the lines:
on a GPU they would hang or read garbage. Deterministic, no threads."""
from __future__ import annotations

import numpy as np

from kerneldsl.errors import DivergenceError

from .collectives import FragmentOps, plane_op
from .memory import LaunchState, SharedArray

_DONE = ("done", -1)


class CubeRunner:
    """Runs the cubes of one launch of an interpreted kernel, one after another."""

    def __init__(self, binary, state: LaunchState, values: list, memory: dict):
        self.b = binary
        self.k = binary.kir
        self.state = state
        self.values = values  # the unit function's parameters after the unit's own (tensors, scalars)
        self.memory = memory  # tensor name -> TensorAccess
        self.P = self.k.plane_dim

    def run(self, cube: tuple):
        k, state = self.k, self.state
        state.cube = cube
        dx, dy, dz = k.cube_dim
        n = dx * dy * dz
        P = self.P
        shared = {name: SharedArray(state, decl) for name, decl in k.shared.items()}
        memory = {**self.memory, **shared}
        tiles = [{f: np.zeros(ft.rows * ft.cols, np.float32) for f, ft in k.frags.items()}
                 for _ in range(-(-n // P))]
        state.plane_phase = [0] * len(tiles)
        cube_t = tuple(np.int32(c) for c in cube)
        grid_t = tuple(np.int32(g) for g in state.grid)
        args = self.values + list(shared.values())
        units = [self.b.fn(self.b.helpers, cube_t, grid_t,
                           (np.int32(u % dx), np.int32(u // dx % dy), np.int32(u // (dx * dy))),
                           np.int32(u), np.int32(u // P), np.int32(u % P), tiles[u // P], *args) for u in range(n)]
        requests = [None] * n

        def advance(u, value=None):
            state.unit = u
            try:
                requests[u] = units[u].send(value)
            except StopIteration:
                requests[u] = _DONE

        for u in range(n):
            advance(u)
        frag_ops = FragmentOps(k, memory)
        while True:
            progressed = False
            for p in range(len(tiles)):
                lanes = list(range(p * P, min(n, p * P + P)))
                reqs = [requests[u] for u in lanes]
                if not all(r[0] in ("plane", "frag") for r in reqs):
                    continue
                split = self._same_split(reqs, lanes, "plane")
                s = self.b.splits[split]
                if reqs[0][0] == "plane":
                    results = plane_op(s, [r[2] for r in reqs], [r[3] for r in reqs], P)
                    state.plane_phase[p] += 1  # orders the plane's shared-memory accesses around it
                else:
                    frag_ops.run(s, p, lanes, tiles[p], [r[2:] for r in reqs], self._line(s))
                    results = [None] * len(lanes)
                for u, res in zip(lanes, results):
                    advance(u, res)
                progressed = True
            if self._role_barriers(requests, advance, shared):
                continue
            if progressed:
                continue
            if all(r is _DONE for r in requests):
                for sh in shared.values():
                    sh.new_epoch()  # (reports unwritten reads of the last epoch)
                return
            if all(r[0] == "barrier" for r in requests):
                self._same_split(requests, range(n), "cube")
                for sh in shared.values():
                    sh.new_epoch()
                for u in range(n):
                    advance(u)
                continue
            raise DivergenceError(self._stuck(requests))

    def _role_barriers(self, requests, advance, shared) -> bool:
        """Release the units of every kd.sync_role() that all of its role's units have
        reached; whether any were."""
        released = False
        for u, r in enumerate(requests):
            if r is _DONE or r[0] != "barrier" or self.b.splits[r[1]].role is None:
                continue
            lo, n = self.b.splits[r[1]].role
            if u != lo:
                continue
            units = range(lo, lo + n)
            if all(requests[v] is not _DONE and requests[v][0] == "barrier" for v in units):
                self._same_split([requests[v] for v in units], units, "role")
                for sh in shared.values():
                    sh.new_epoch(units)  # orders the role's own accesses only
                for v in units:
                    advance(v)
                released = True
        return released

    def _line(self, s) -> int:
        return s.loc.line if s.loc is not None else 0

    def _what(self, request, many: bool = True) -> str:
        """What a unit (`many`: units) at `request` does, as a verb phrase."""
        if request is _DONE:
            return "have finished" if many else "has finished"
        s = self.b.splits[request[1]]
        what = {"barrier": s.origin or "kd.sync_cube()" if hasattr(s, "origin") else "kd.sync_cube()", "plane": f"plane operation {getattr(s, 'op', '')}"}.get(
            request[0], f"fragment operation {type(s).__name__}")
        return f"{'wait' if many else 'waits'} at {what} at {self.state.where(self._line(s))}"

    def _same_split(self, reqs, units, scope: str) -> int:
        first = reqs[0][1]
        for u, r in zip(units, reqs):
            if r[1] != first:
                st = self.state
                raise DivergenceError(
                    f"{st.name}: the units of a {scope} must reach the same split point together, but "
                    f"{st.describe_unit(list(units)[0])} and others {self._what(reqs[0])} while "
                    f"{st.describe_unit(u)} and others {self._what(r)}")
        return first

    def _stuck(self, requests) -> str:
        """A message for a cube whose units cannot all proceed: who waits where."""
        groups: dict = {}
        for u, r in enumerate(requests):
            groups.setdefault(r if r is _DONE else r[:2], []).append(u)
        parts = [f"{_units(us)} {self._what(r, len(us) > 1)}" for r, us in groups.items()]
        return (f"{self.state.name}: cube {self.state.cube} cannot continue: " + "; ".join(parts) +
                " (a barrier or plane operation must be reached by every unit of its cube or plane: keep it "
                "out of branches that depend on the unit)")


def _units(us: list) -> str:
    if len(us) == 1:
        return f"unit {us[0]}"
    if us == list(range(us[0], us[-1] + 1)):
        return f"units {us[0]}-{us[-1]}"
    return f"units {', '.join(map(str, us[:8]))}{', ...' if len(us) > 8 else ''}"
