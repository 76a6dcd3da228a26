"""A toy decode loop on a paged KV cache with rudnn.paged_attention: three sequences with
prompts of different lengths are prefilled in one packed call, then each step appends one
token per sequence (taking a fresh page from a free list when a page fills) and attends
over the growing cache with grouped-query heads; every output is checked at the end against
dense attention over the sequence's whole history.

Run:  python examples/paged_decode.py            (KERNELDSL_RUNTIME=opencl|cuda to switch)
"""
import numpy as np

import kerneldsl as kd
from rudnn.paged_attention import DevicePlan, HostPlan

PAGE, PAGES, HQ, HKV, D = 4, 32, 8, 2, 32
SCALE = 1 / np.sqrt(D)


def dense_attention(q, k, v):
    """softmax(scale·q·kᵀ)·v for one query row [HQ, D] over keys [T, HKV, D] (GQA)."""
    k, v = np.repeat(k, HQ // HKV, axis=1), np.repeat(v, HQ // HKV, axis=1)  # [T, HQ, D]
    s = SCALE * np.einsum("hd,thd->ht", q, k)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("ht,thd->hd", p / p.sum(-1, keepdims=True), v)


class PagedCache:
    """K/V pages on a runtime, a free list, and each sequence's page table and length."""

    def __init__(self, rt, sequences):
        self.k = rt.zeros((PAGES, PAGE, HKV, D))
        self.v = rt.zeros((PAGES, PAGE, HKV, D))
        self.free = list(range(PAGES - 1, -1, -1))
        self.tables = [[] for _ in range(sequences)]
        self.lengths = [0] * sequences

    def plan(self, rows):
        """Grow each sequence by its rows' tokens (rows: (sequence, position) pairs, in order),
        taking pages as needed, and return the plan that writes and reads them."""
        for s, pos in rows:
            if pos // PAGE >= len(self.tables[s]):
                self.tables[s].append(self.free.pop())
            self.lengths[s] = max(self.lengths[s], pos + 1)
        return HostPlan(PAGE, PAGES, self.tables, self.lengths, [s for s, _ in rows], [p for _, p in rows])


def main():
    rt = kd.runtime()  # $KERNELDSL_RUNTIME or "cpu"
    rng = np.random.default_rng(0)
    prompts, steps = [5, 9, 2], 7
    cache = PagedCache(rt, len(prompts))
    history = [(np.zeros((0, HKV, D)), np.zeros((0, HKV, D))) for _ in prompts]  # dense copy, for checking
    checks = []  # (sequence, query, output row, tokens seen)

    def step(rows):
        n = len(rows)
        q = rng.standard_normal((n, HQ, D)).astype(np.float32)
        new_k = rng.standard_normal((n, HKV, D)).astype(np.float32)
        new_v = rng.standard_normal((n, HKV, D)).astype(np.float32)
        plan = DevicePlan.upload(cache.plan(rows), rt.tensor(q))
        plan.append(rt.tensor(new_k), rt.tensor(new_v), cache.k, cache.v)  # in place
        out = plan.attention(rt.tensor(q), cache.k, cache.v, SCALE, True).numpy()  # causal by absolute position
        for r, (s, pos) in enumerate(rows):
            hk, hv = history[s]
            history[s] = (np.concatenate([hk, new_k[r:r + 1]]), np.concatenate([hv, new_v[r:r + 1]]))
            checks.append((s, q[r], out[r], pos + 1))

    # prefill: every prompt token of every sequence in one packed, ragged call
    step([(s, p) for s, n in enumerate(prompts) for p in range(n)])
    for _ in range(steps):  # decode: one token per sequence per step
        step([(s, cache.lengths[s]) for s in range(len(prompts))])

    err = max(np.abs(out - dense_attention(q, history[s][0][:seen], history[s][1][:seen])).max()
              for s, q, out, seen in checks)
    print(f"{len(checks)} rows over {len(prompts)} sequences (lengths {cache.lengths}, "
          f"{PAGES - len(cache.free)} pages of {PAGE}) on {rt.name}: max abs error {err:.1e}")
    assert err < 1e-4
    print("ok")


if __name__ == "__main__":
    main()
