"""Dispatch and combine kernels.

Dispatch: each (token, slot) pair takes a place in its expert's count with an
atomic add (the returned old count is its rank inside the expert), the counts are
scanned into offsets (`tiles.exclusive_scan`; for few pairs both in one cube,
`count_and_scan`, the counts in shared memory), and one cube per token copies the
token's row to each of its experts' rows. The same cube records, in ascending
expert-id order, the row and the weight of each slot, which is the order combine
sums in.
"""
from __future__ import annotations

import kerneldsl as kd

from .tiles import scan_into


@kd.kernel
def count_experts(ids: kd.Tensor[kd.u32, 2], counts: kd.Tensor[kd.u32, 1], rank: kd.Tensor[kd.u32, 1], n: kd.i32):
    """counts[e] += 1 for every pair routed to e; rank[pair] = the pair's place inside e."""
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        k = ids.shape[1]
        rank[i] = kd.atomic_add(counts, ids[i // k, i % k], 1)


@kd.kernel
def count_and_scan(ids: kd.Tensor[kd.u32, 2], rank: kd.Tensor[kd.u32, 1], offsets: kd.Tensor[kd.u32, 1], n: kd.i32,
                   E: kd.i32, EXPERTS: kd.Const[int]):
    """count_experts and the scan of its counts in one cube, for few pairs: the counts (at
    most EXPERTS experts) live in shared memory, each pair's shared atomic add gives its rank,
    and offsets [E + 1] becomes their exclusive scan (offsets[E] = n)."""
    t = kd.unit_pos_x()
    U = kd.cube_units()
    counts = kd.shared(kd.u32, EXPERTS)
    for e in range(t, E, U):
        counts[e] = kd.u32(0)
    kd.sync_cube()
    k = ids.shape[1]
    for i in range(t, n, U):
        rank[i] = kd.atomic_add(counts, ids[i // k, i % k], kd.u32(1))
    kd.sync_cube()
    scan_into(counts, offsets, E, False, 1)


@kd.kernel
def place_rows(x: kd.Tensor, ids: kd.Tensor[kd.u32, 2], weights: kd.Tensor, rank: kd.Tensor[kd.u32, 1],
               offsets: kd.Tensor[kd.u32, 1], values: kd.Tensor, row_experts: kd.Tensor[kd.u32, 1],
               pair_rows: kd.Tensor[kd.u32, 1], pair_weights: kd.Tensor[kd.f32, 1]):
    """One cube per token: copy x[token] to the row of each of its slots, and list the
    slots' rows and weights in ascending expert-id order for combine."""
    tok = kd.cube_pos_x()
    t = kd.unit_pos_x()
    U = kd.cube_units()
    k = ids.shape[1]
    H = x.shape[1]
    for j0 in range(0, k, U):
        j = j0 + t
        if j < k:
            e = ids[tok, j]
            row = offsets[e] + rank[tok * k + j]
            row_experts[row] = e
            before = 0
            for i in range(k):
                if ids[tok, i] < e:
                    before += 1
            pair_rows[tok * k + before] = row
            pair_weights[tok * k + before] = kd.f32(weights[tok, j])
    for j in range(k):
        dst = kd.i32(offsets[ids[tok, j]] + rank[tok * k + j])
        for c0 in range(0, H, U):
            c = c0 + t
            if c < H:
                values[dst, c] = x[tok, c]


@kd.kernel
def combine_rows(y: kd.Tensor, pair_rows: kd.Tensor[kd.u32, 1], pair_weights: kd.Tensor[kd.f32, 1],
                 out: kd.Tensor, k: kd.i32):
    """out[tok, c] = sum over the token's slots, in ascending expert id, of weight * y[row, c] (f32)."""
    tok = kd.cube_pos_x()
    t = kd.unit_pos_x()
    U = kd.cube_units()
    W = y.shape[1]
    full = W - W % U
    for c0 in range(0, full, U):
        acc = kd.f32(0)
        for r in range(k):
            acc += pair_weights[tok * k + r] * kd.f32(y[kd.i32(pair_rows[tok * k + r]), c0 + t])
        out[tok, c0 + t] = acc
    if full + t < W:
        acc = kd.f32(0)
        for r in range(k):
            acc += pair_weights[tok * k + r] * kd.f32(y[kd.i32(pair_rows[tok * k + r]), full + t])
        out[tok, full + t] = acc
