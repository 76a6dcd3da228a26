"""Cache append: query row r's new K and V rows written in place into slot
positions[r] % page_size of page tables[s][positions[r] // page_size]; nothing else is
touched. One launch writes both caches (a cube a row: its K row, then its V row), since each
launch costs more host time than the copy does at decode sizes."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def _append_row(new, cache, r, page, slot):
    """new[r] into cache[page, slot] (every head and element), the cube's units side by side."""
    H = cache.shape[2]
    D = cache.shape[3]
    for e in range(kd.unit_pos_x(), H * D, kd.cube_units()):
        cache[page, slot, e // D, e % D] = new[r, e // D, e % D]


@kd.kernel
def append_kernel(new_k: kd.Tensor, k_cache: kd.Tensor, new_v: kd.Tensor, v_cache: kd.Tensor, tables: kd.Tensor,
                  seq_ids: kd.Tensor, positions: kd.Tensor):
    r = kd.cube_pos_x()
    ps = k_cache.shape[1]
    p = positions[r]
    page = tables[seq_ids[r], p // ps]
    _append_row(new_k, k_cache, r, page, p % ps)
    _append_row(new_v, v_cache, r, page, p % ps)
