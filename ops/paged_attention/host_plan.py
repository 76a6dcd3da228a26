"""`HostPlan`: the page tables and query rows of one paged-attention call, checked on the host
(SPEC §4) before anything is uploaded or launched. Every failure is a `PagedAttentionError`
naming the argument and, for lists, the offending entry (`tables[1][0]`, `positions[3]`)."""
from __future__ import annotations

import numbers

from .problem import CHECKS

_CHECK = CHECKS.at("HostPlan")


def _int(name: str, value, low: int | None = None, high: int | None = None, high_is: str = "") -> int:
    """A Python or numpy integer (never a bool) in [low, high], returned as an int."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    return _CHECK.integer(name, value, low=low, high=high, high_is=high_is)


def _int_list(name: str, value) -> list:
    """A list/tuple (or 1-D array) of ints, as a list of Python ints (each entry checked)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        _CHECK.fail(f"{name} must be a sequence of ints, got {value!r}")
    return [_int(f"{name}[{i}]", x) for i, x in enumerate(value)]


def pages_needed(length: int, page_size: int) -> int:
    """Pages holding `length` tokens: ceil(length / page_size)."""
    return -(-length // page_size)


class HostPlan:
    """Where every token of every sequence lives in the paged cache, and which sequence and
    absolute position each query row has. `tables[s]` lists sequence s's physical pages in
    logical order; token t of s sits in slot t % page_size of page tables[s][t // page_size]."""

    def __init__(self, page_size: int, pages: int, tables, lengths, sequence_ids, positions):
        self.page_size = _int("page_size", page_size, low=1)
        self.pages = _int("pages", pages, low=1)
        if isinstance(tables, (str, bytes)) or not hasattr(tables, "__len__"):
            _CHECK.fail(f"tables must be a non-empty list of page lists, got {tables!r}")
        if len(tables) == 0:
            _CHECK.fail("tables must be a non-empty list of page lists (one per sequence), got an empty list")
        self.tables = [_int_list(f"tables[{s}]", t) for s, t in enumerate(tables)]
        self.lengths = _int_list("lengths", lengths)
        if len(self.lengths) != len(self.tables):
            _CHECK.fail(f"lengths must have one entry per table ({len(self.tables)}), got {len(self.lengths)}")
        self.sequence_ids = _int_list("sequence_ids", sequence_ids)
        self.positions = _int_list("positions", positions)
        if len(self.positions) != len(self.sequence_ids):
            _CHECK.fail(f"positions must have one entry per query row (len(sequence_ids) = "
                        f"{len(self.sequence_ids)}), got {len(self.positions)}")
        for s, (table, length) in enumerate(zip(self.tables, self.lengths)):
            self._check_table(s, table, length)
        for r, (sid, pos) in enumerate(zip(self.sequence_ids, self.positions)):
            _int(f"sequence_ids[{r}]", sid, low=0, high=len(self.tables) - 1, high_is="len(tables) - 1")
            _int(f"positions[{r}]", pos, low=0)
            if self.lengths[sid] > 0 and pos >= self.lengths[sid]:
                _CHECK.fail(f"positions[{r}] must be < lengths[{sid}] ({self.lengths[sid]}) of its sequence "
                            f"{sid}, got {pos}")

    def _check_table(self, s: int, table: list, length: int) -> None:
        _int(f"lengths[{s}]", length, low=0)
        used = pages_needed(length, self.page_size)
        if len(table) < used:
            _CHECK.fail(f"tables[{s}] must have at least ceil(lengths[{s}] / page_size) = {used} entries "
                        f"(length {length}, page_size {self.page_size}), got {len(table)}")
        first_use = {}
        for i, page in enumerate(table):
            _int(f"tables[{s}][{i}]", page, low=0, high=self.pages - 1, high_is="pages - 1")
            if i < used:
                if page in first_use:
                    _CHECK.fail(f"tables[{s}][{i}] repeats page {page} of tables[{s}][{first_use[page]}]: the used "
                                f"entries of one table must be distinct")
                first_use[page] = i

    def query_count(self) -> int:
        """Query rows of the plan (len(sequence_ids))."""
        return len(self.sequence_ids)

    def sequence_count(self) -> int:
        """Sequences of the plan (len(tables))."""
        return len(self.tables)

    def write_slot(self, r: int) -> tuple:
        """(page, slot) that query row r's token occupies: where `append` writes it."""
        s, p = self.sequence_ids[r], self.positions[r]
        return self.tables[s][p // self.page_size], p % self.page_size

    def visible(self, r: int, causal: bool) -> int:
        """Tokens query row r sees: [0, L) or, causal, [0, min(L, p + 1))."""
        length = self.lengths[self.sequence_ids[r]]
        return min(length, self.positions[r] + 1) if causal else length

    def validate_writes(self) -> None:
        """The extra rules of `append`: each row's position < its sequence's length, its page
        listed by exactly one sequence's table, and no two rows writing the same slot."""
        owners: dict = {}
        for s, table in enumerate(self.tables):
            for page in table:
                owners.setdefault(page, set()).add(s)
        written: dict = {}
        for r, (sid, pos) in enumerate(zip(self.sequence_ids, self.positions)):
            if pos >= self.lengths[sid]:
                _CHECK.fail(f"validate_writes: positions[{r}] must be < lengths[{sid}] ({self.lengths[sid]}) to "
                            f"be written, got {pos}")
            page, slot = self.write_slot(r)
            if len(owners[page]) != 1:
                _CHECK.fail(f"validate_writes: query row {r} writes page {page} (tables[{sid}]"
                            f"[{pos // self.page_size}]), which sequences {sorted(owners[page])} all reference: "
                            f"a written page must belong to exactly one sequence")
            if (page, slot) in written:
                _CHECK.fail(f"validate_writes: query rows {written[(page, slot)]} and {r} both write slot {slot} "
                            f"of page {page}")
            written[(page, slot)] = r

    def __repr__(self) -> str:
        return (f"HostPlan(page_size={self.page_size}, pages={self.pages}, sequences={self.sequence_count()}, "
                f"queries={self.query_count()})")
