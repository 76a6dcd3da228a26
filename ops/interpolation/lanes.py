"""Interpolation kernels for devices whose units are SIMD lanes (the cpu runtime), used where
the width axis is upsampled by an integer factor S with taps that stay next to their input
column (tuning.lane_factor: Nearest / NearestExact at out = S·in, Linear at out = S·in, or
with aligned corners at out − 1 = S·(in − 1)).

On such devices a load whose index is not affine in the unit position becomes a gather
(13-18x slower than a vector load: RESULTS.md, 2026-12-01), and resample.py's kernels read
x[iw[ow]] through index tables. Here a unit owns one INPUT column i: the forward kernel
reads x[i − 1], x[i], x[i + 1] of each line (vector loads; the ends masked) and writes the S
outputs S·i + k (interleaved stores); the backward kernel reads the outputs S·(i − 1) ..
S·(i + 2) − 1 of each line (interleaved loads) and weighs each with what its taps give i.
The taps are computed per unit with taps.axis_taps, the same arithmetic as the tables of
resample.py, and the sums run in the same order, so the results are those of resample.py.
The depth and height axes read resample.py's tables: uniform over a cube (one row)."""
from __future__ import annotations

import kerneldsl as kd

from .taps import axis_taps


@kd.func
def pick(t, i, vm, v0, vp):
    """The value at column t ∈ {i − 1, i, i + 1} of a line, given those three."""
    return kd.select(t < i, vm, kd.select(t > i, vp, v0))


@kd.func
def output_taps(i, k, size_in, size_out, scale, MODE, ALIGN, S):
    """Output S·i + k's width taps (clamped into the row): (T indices, T weights) as
    axis_taps; one-tap modes read column i with weight 1 (exact: floor(j·in/out) = i)."""
    if MODE == "Linear":
        taps = axis_taps(kd.min(S * i + k, size_out - 1), size_in, size_out, scale, MODE, ALIGN)
    else:
        taps = (i, kd.f32(1.0))
    return taps


@kd.kernel
def forward_lanes(x: kd.Tensor, y: kd.Tensor, id_: kd.Tensor[kd.i32, 2], wd: kd.Tensor[kd.f32, 2],
                  ih: kd.Tensor[kd.i32, 2], wh: kd.Tensor[kd.f32, 2], rows: kd.i32, scale: kd.f32,
                  TD: kd.Const[int], TH: kd.Const[int], MODE: kd.Const[str], ALIGN: kd.Const[bool],
                  S: kd.Const[int], PLANES: kd.Const[int], EXACT: kd.Const[bool], WIDE: kd.Const[bool],
                  BX: kd.Const[int]):
    """y = x resampled, both contiguous [planes, D, H, W], the width upsampled by S. Cube x is
    output row r (of the `rows` = D·H a plane) of plane group g; cube y and the unit pick the
    input column i, whose S outputs the unit computes in each of its PLANES planes (all loads
    before any store). EXACT (the host checked): every unit's column and S outputs lie in
    the row (no masks on the stores). WIDE: 64-bit element offsets."""
    g = kd.cube_pos_x() // rows
    r = kd.cube_pos_x() - g * rows
    od = r // y.shape[2]
    oh = r - od * y.shape[2]
    W_in = x.shape[3]
    W = y.shape[3]
    i = kd.cube_pos_y() * BX + kd.unit_pos_x()
    line_offsets = ()
    line_weights = ()
    for a in kd.unroll(TD):
        for b in kd.unroll(TH):
            line_offsets = line_offsets + ((id_[od, a] * x.shape[2] + ih[oh, b]) * W_in,)
            line_weights = line_weights + (wd[od, a] * wh[oh, b],)
    T = 2 if MODE == "Linear" else 1
    taps = ()
    for k in kd.unroll(S):
        taps = taps + output_taps(i, k, W_in, W, scale, MODE, ALIGN, S)
    plane_in = x.shape[1] * x.shape[2] * W_in
    plane_out = y.shape[1] * y.shape[2] * W
    values = ()
    for q in kd.unroll(PLANES):
        p = kd.min(g * PLANES + q, x.shape[0] - 1)
        base = kd.i64(p) * plane_in if WIDE else p * plane_in
        lines = ()
        for t in kd.unroll(TD * TH):
            at = base + (line_offsets[t] + i)
            vm = kd.f32(0)
            v0 = kd.f32(0)
            vp = kd.f32(0)
            if EXACT:
                v0 = kd.f32(x[at])
            elif i < W_in:
                v0 = kd.f32(x[at])
            if T > 1:
                if i >= 1 and i <= W_in:
                    vm = kd.f32(x[at - 1])
                if i + 1 < W_in:
                    vp = kd.f32(x[at + 1])
            lines = lines + (vm, v0, vp)
        for k in kd.unroll(S):
            acc = kd.f32(0)
            for t in kd.unroll(TD * TH):
                row = kd.f32(0)
                for c in kd.unroll(T):
                    at_k = k * 2 * T
                    v = pick(taps[at_k + c], i, lines[3 * t], lines[3 * t + 1], lines[3 * t + 2])
                    row += taps[at_k + T + c] * v
                acc += line_weights[t] * row
            values = values + (acc,)
    at_out = r * W + S * i
    for q in kd.unroll(PLANES):
        p = g * PLANES + q
        if p < x.shape[0]:
            first = (kd.i64(p) * plane_out if WIDE else p * plane_out) + at_out
            for k in kd.unroll(S):
                if EXACT:
                    y[first + k] = values[q * S + k]
                elif S * i + k < W:
                    y[first + k] = values[q * S + k]
