"""The feature x runtime matrix: one row per feature (a `feature` marker, else the test
module's name), one column per runtime, each cell the worst outcome of its tests."""
from __future__ import annotations

from collections import defaultdict

NO_RUNTIME = "-"  # the column of tests that take no `runtime`
_RANK = {"skip": 1, "pass": 2, "FAIL": 3}  # a cell keeps its worst outcome; a pass outranks a skip


class FeatureMatrix:
    """Outcomes recorded per (feature, runtime column), printed as a table."""

    def __init__(self):
        self.cells: dict = defaultdict(dict)

    def __bool__(self) -> bool:
        return bool(self.cells)

    def record(self, feature: str, column: str, outcome: str) -> None:
        """`outcome` is "pass", "skip" or "FAIL"."""
        row = self.cells[feature]
        prev = row.get(column)
        if prev is None or _RANK[outcome] > _RANK[prev]:
            row[column] = outcome

    def lines(self) -> list:
        """The table as text lines: a header, then one row per feature ('.' where no test ran)."""
        cols = sorted({c for row in self.cells.values() for c in row}, key=lambda c: (c == NO_RUNTIME, c))
        first = max(len("feature"), *(len(f) for f in self.cells)) + 2
        width = max(9, *(len(c) + 2 for c in cols))
        out = ["feature".ljust(first) + "".join(c.ljust(width) for c in cols)]
        for feature in sorted(self.cells):
            row = self.cells[feature]
            out.append(feature.ljust(first) + "".join(row.get(c, ".").ljust(width) for c in cols))
        return [line.rstrip() for line in out]
