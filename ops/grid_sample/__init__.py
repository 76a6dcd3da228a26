"""rudnn.grid_sample: sampling [N, C, H, W] (or [N, C, D, H, W]) inputs at grid points, as
torch.nn.functional.grid_sample, and its gradients for input and grid (SPEC §9).

Each entry point validates its call (problem.py), returns empty (or zero) results for
empty shapes without launching, views 2-D calls as 3-D ones with a depth of 1, copies
strided tensors to contiguous, and launches sample.py: one unit per grid point computes
its taps once and loops over the channels (F32 accumulation, one cast to the dtype). The
input gradient is scattered as 64-bit fixed-point integers (fixed_point.py), so it is the
same whatever order the units run in; the grid gradient is a per-point sum over channels.
Where units are SIMD lanes (tuning.lane_plan: the cpu runtime), lanes.py runs instead: a cube
of consecutive grid points (vector grid reads and output stores, taps kept for every
channel), and an input gradient summed plane by plane in a fixed order by one unit. For inputs
whose channels fill whole vectors (tuning.lane_last_plan), lanes_last.py: the input
copied to channels-last rows, a cube's units channels (vector loads of a tap's channels); its
backward behind LANE_LAST_BACKWARD (off by default). Where both serve a forward, lane_forms.py
runs the faster for the CPU and shape (timed once a key for large calls).

GPU forms behind tuning constants (benchmarks/grid_variants.py times them all):
channels_last.py (CHANNELS_LAST, on: the forward on a channels-last copy, where a pixel's
channels fill a memory line; with FORWARD_CHOOSE_CHANNELS, chunks.py's form is launched
beside it and the device runs one or the other from the grid's smoothness, gate.py),
chunks.py (FORWARD_CHANNELS, on: for fewer channels, the direct kernel split over chunks of
channels, each plane loading a chunk's channels at once where its taps lie close), staged.py
(STAGED_FORWARD: 2-D forward, a tile's input box through shared memory where it fits, chosen
per cube on the device), tiles of grid points for the direct forward (FORWARD_TILE_W), and
backward_last.py (BACKWARD_CHANNELS_LAST: the backward on channels-last copies, native 64-bit
fixed-point atomics where the device has them).
backward_gather.py (BACKWARD_GATHER, on; bilinear and nearest where units are not SIMD
lanes) takes the input gradient before both: grid points bucketed by cell, then a unit a
pixel sums the same fixed-point integers in registers (no atomics on the values), the grid
gradient by backward_last's kernel with its scatter off; with BACKWARD_GATHER_CHOOSE (on),
the device picks that form or the one without channels-last copies from the grid's
smoothness (gate.py). Small backward calls (tuning.
small_backward) take small.py before all of these: one launch, a unit an input element summing
its sample's taps in order."""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.replay import replayable

from . import backward_gather as _gather
from . import backward_last as _bwd_last
from . import channels_last as _last
from . import chunks as _chunks
from . import fixed_point as _fixed
from . import gate as _gate
from . import lane_forms as _lane_forms
from . import lanes as _lanes
from . import lanes_last as _lanes_last
from . import lanes_scatter as _lanes_scatter
from . import sample as _sample
from . import small as _small
from . import staged as _staged
from .options import GridSampleMode, GridSampleOptions, GridSamplePaddingMode
from ..moe.tiles import SCAN_UNITS, exclusive_scan
from ..validation import aligned
from .problem import GridSampleError, sample_problem
from . import tuning as _tuning
from .tuning import (MAX_CUBES, TAPS, UNITS, as_5d, backward_gather_channels, backward_gather_group,
                     backward_gather_vector, backward_group, backward_staged_channels, channels_last_lanes,
                     channels_last_vectors, cubes, forward_choose_chunk, forward_chunk, forward_tiles, gated_cubes,
                     gather_cells, headroom, lane_last_plan, lane_plan, small_backward, staged_plan, transpose_lanes)

__all__ = ["GridSampleError", "GridSampleMode", "GridSamplePaddingMode", "GridSampleOptions", "grid_sample",
           "grid_sample_backward"]


@replayable
def grid_sample(input, grid, options: GridSampleOptions = GridSampleOptions()) -> kd.Tensor:
    """input [N, C, *S] sampled at grid [N, *So, dims] (x first, in [−1, 1]) -> [N, C, *So]."""
    p = sample_problem("grid_sample", input, grid, options)
    rt = p.runtime
    out = rt.empty(p.out_shape, input.dtype)
    points = input.shape[0] * p.locations
    if points == 0 or input.shape[1] == 0:
        return out
    o = p.options
    x5, y5 = as_5d(input.contiguous(), p.dims, 2), as_5d(out, p.dims, 2)
    g5 = as_5d(grid.contiguous(), p.dims, 1)
    lanes = channels_last_lanes(rt.capabilities, input.shape[1], input.shape[0], input.dtype.itemsize)
    if lanes:
        k = forward_choose_chunk(input.shape[1], x5.size // (x5.shape[0] * x5.shape[1]))
        rough = None
        if k:   # the device picks chunks (smooth grids) or the channels-last form (rough ones): gate.py
            smooth, rough = _rough_gate(g5, points, x5.shape[2:], (*_runtime_options(o), o.mode.value, p.dims))
            _sample_chunks(x5, g5, out, points, p.locations, o, p.dims, k, 0, smooth)
        _sample_channels_last(x5, g5, out, points, p.locations, o, p.dims, lanes, rough)
        return out
    last = lane_last_plan(rt.capabilities, input.shape[1], input.shape[0], x5.size // (x5.shape[0] * x5.shape[1]),
                          input.dtype.itemsize)
    plan = _lane_plan(rt, x5, y5, o, p.dims)
    if last is not None and plan is not None:   # both serve: the faster for this CPU and shape (lane_forms.py)
        form = _lane_forms.choose(rt, input.dtype, p.dims, o.mode.value, input.shape[1], x5.size, out.size,
                                  lambda: _forward_lanes_last(x5, g5, out, p.locations, o, p.dims, last),
                                  lambda: _forward_lanes(x5, g5, out, y5, o, p.dims, plan))
        if form == _lane_forms.LANES:
            last = None
    if last is not None:   # units are SIMD lanes, channels in whole vectors: lanes_last.py
        _forward_lanes_last(x5, g5, out, p.locations, o, p.dims, last)
        return out
    if plan is not None:   # units are SIMD lanes: a cube an output row, vector grid reads
        _forward_lanes(x5, g5, out, y5, o, p.dims, plan)
        return out
    staged = staged_plan(rt.capabilities, p.dims, x5.shape[3:], input.dtype.itemsize)
    if staged is not None:   # smooth grids: a tile's input box through shared memory (decided per cube)
        tw, ch, area = staged
        count = y5.shape[0] * -(-y5.shape[3] // (UNITS // tw)) * -(-y5.shape[4] // tw)
        _staged.sample_staged[count, UNITS](x5, g5, y5, *_runtime_options(o), o.mode.value, UNITS, tw, ch, area)
        return out
    k = forward_chunk(input.shape[1], x5.size // (x5.shape[0] * x5.shape[1]))
    if k:   # K channels a unit (chunks.py): all their loads at once in cubes whose taps lie close
        _sample_chunks(x5, g5, out, points, p.locations, o, p.dims, k, _tuning.forward_area(k))
        return out
    tw, count = forward_tiles(y5.shape[3:], y5.shape[0] * y5.shape[2])
    _sample.sample_forward[count, UNITS](x5, g5, y5, points, *_runtime_options(o), o.mode.value, p.dims, UNITS, tw)
    return out


@replayable
def grid_sample_backward(input, grid, out_grad, options: GridSampleOptions = GridSampleOptions()) -> tuple:
    """(grad_input, grad_grid) of grid_sample, both in the input's dtype; deterministic."""
    p = sample_problem("grid_sample_backward", input, grid, options, out_grad, backward=True)
    dx, grad_grid = _backward(p, input, grid, out_grad)
    if p.options.mode is GridSampleMode.Nearest:
        # Nearest's grid gradient is zero (SPEC §9), whatever the kernels made of a NaN or inf
        # input pixel times its zero slope
        grad_grid = p.runtime.zeros(grid.shape, input.dtype)
    return dx, grad_grid


def _backward(p, input, grid, out_grad) -> tuple:  # noqa: A002
    """(grad_input, grad_grid) of a checked call, from whichever kernels serve it."""
    rt = p.runtime
    points = input.shape[0] * p.locations
    size = input.size
    if points == 0 or input.shape[1] == 0:
        return rt.zeros(input.shape, input.dtype), rt.zeros(grid.shape, input.dtype)
    o = p.options
    grad_grid = rt.empty(grid.shape, input.dtype)
    dx = rt.empty(input.shape, input.dtype)
    go = out_grad.contiguous()
    x5, g5, go5 = as_5d(input.contiguous(), p.dims, 2), as_5d(grid.contiguous(), p.dims, 1), as_5d(go, p.dims, 2)
    last = lane_last_plan(rt.capabilities, input.shape[1], input.shape[0], x5.size // (x5.shape[0] * x5.shape[1]),
                          input.dtype.itemsize, backward=True)
    if last is not None:   # units are SIMD lanes, channels in whole vectors: lanes_last.py
        _backward_lanes_last(x5, g5, go5, grad_grid, dx, p.locations, o, p.dims, last)
        return dx, grad_grid
    plan = _lane_plan(rt, x5, go5, o, p.dims)
    if plan is not None:   # units are SIMD lanes: a cube a chunk of points, then planes a cube
        sizes = _lane_sizes(x5, go5)
        taps = p.locations * input.shape[0] * plan.taps
        tap_at, tap_w = rt.empty((taps,), kd.i32), rt.empty((taps,), kd.f32)
        _lanes.grid_grad_lanes[_lane_grid(go5, plan), plan.bx](
            x5.reshape(x5.size), g5.reshape(g5.size), go.reshape(go.size), grad_grid.reshape(grad_grid.size),
            tap_at, tap_w, *sizes, *_runtime_options(o), o.mode.value, p.dims, plan.exact, plan.bx)
        planes = x5.shape[0] * x5.shape[1]
        cube = (planes // plan.planes, plan.scatter_units)
        if plan.vector_planes:   # 8 planes a one-unit cube, interleaved: vector read-modify-writes
            plane = size // planes
            acc = rt.empty((planes * (plane + 1),), kd.f32)
            whole = p.locations % 8 == 0 and plane % 8 == 0 and go.offset % 8 == 0
            _lanes_scatter.scatter_planes[planes // 8, 1](go.reshape(go.size), tap_at, tap_w, acc, dx.reshape(size),
                                                          x5.shape[1], p.locations, plane, plan.taps, whole)
        elif plan.shared:
            _lanes.scatter_input_grad[cube](go.reshape(go.size), tap_at, tap_w, dx.reshape(size), x5.shape[1],
                                            p.locations, plan.taps, size // planes, plan.planes)
        else:
            acc = rt.empty((planes * (size // planes + 1),), kd.f32)
            _lanes.scatter_input_grad_global[cube](go.reshape(go.size), tap_at, tap_w, acc, dx.reshape(size),
                                                   x5.shape[1], p.locations, size // planes, plan.taps, plan.planes)
        return dx, grad_grid
    if small_backward(size, p.locations):   # one launch: small.py
        _small.small_backward[cubes(points) + cubes(size), UNITS](
            x5, g5, go5, as_5d(grad_grid, p.dims, 1), as_5d(dx, p.dims, 2), points, *_runtime_options(o),
            o.mode.value, p.dims, UNITS)
        return dx, grad_grid
    max_bits = rt.zeros((2,), kd.u32)   # max |out_grad|'s bits; nonzero where it has non-finite values
    room = headroom(p.locations, o.mode)
    k = backward_gather_channels(rt.capabilities, o.mode, p.dims, x5.shape[2:], input.shape[1], input.shape[0], points,
                                 input.dtype.itemsize)
    if k:
        _backward_gather(x5, g5, go5, grad_grid, dx, max_bits, points, p.locations, o, p.dims, room, k)
        return dx, grad_grid
    group = backward_group(rt.capabilities, input.shape[1], input.shape[0])
    if group:
        _backward_channels_last(x5, g5, go5, grad_grid, dx, max_bits, points, p.locations, o, p.dims, room, group)
        return dx, grad_grid
    _abs_max(go, max_bits)
    lo, hi, flags = rt.empty((size,), kd.u32), rt.empty((size,), kd.i32), rt.empty((size,), kd.u32)
    _fixed.clear_words[cubes(size), UNITS](lo, hi, flags, size, UNITS)
    _sample.sample_backward[cubes(points), UNITS](
        x5, g5, go5, as_5d(grad_grid, p.dims, 1), lo, hi, flags, max_bits, points, *_runtime_options(o), o.mode.value, p.dims,
        room, UNITS, True, *_ungated(max_bits), False, 1)
    _fixed.finish[cubes(size), UNITS](lo, hi, flags, max_bits, dx.reshape(size), size, room, UNITS)
    return dx, grad_grid


def _rough_gate(g5, points: int, sizes: tuple, opts: tuple) -> tuple:
    """The gate arguments (gate.py) of the two forms of a call that the device chooses between
    (where the grid is smooth, where it is not), once count_rough has counted g5's rough steps
    into a new gate word; sizes: the input's (D, H, W); opts: the kernels' padding, align,
    mode and dims arguments."""
    gate = g5.runtime.zeros((1,), kd.u32)
    _gather.count_rough[min(cubes(points), MAX_CUBES), UNITS](g5.reshape(g5.size), gate, points, *sizes, *opts, UNITS)
    limit = _gate.rough_limit(points)
    return (gate, limit, _gate.IF_SMOOTH), (gate, limit, _gate.IF_ROUGH)


def _ungated(any_u32) -> tuple:
    """The gate arguments of a kernel that always runs (gate.py; `any_u32`: a u32 tensor it
    does not read)."""
    return any_u32, 0, _gate.ALWAYS


def _abs_max(go, max_bits, gated=None) -> None:
    """fixed_point.abs_max_bits over out_grad into max_bits (zeros): for the backwards that do
    not copy out_grad to channels last (that copy does the same work, `_to_channels_last`).
    gated: (gate, limit, WHEN) of gate.py, else it always runs."""
    _fixed.abs_max_bits[min(cubes(go.size), MAX_CUBES), UNITS](go.reshape(go.size), max_bits, go.size, UNITS,
                                                                *(gated or _ungated(max_bits)))


def _to_channels_last(t5, max_bits=None, gated=None) -> kd.Tensor:
    """A contiguous [N, C, *S] tensor copied to channels-last order, flat ([N, S, C]); with
    max_bits (zeros), also abs_max_bits' result over it (`_abs_max`). gated: as `_abs_max`."""
    n, c = t5.shape[:2]
    spatial = t5.size // (n * c)
    tl = t5.runtime.empty((t5.size,), t5.dtype)
    v = transpose_lanes(c, spatial, t5.dtype.itemsize)
    while v > 1 and not aligned(t5, v):  # (imported memory may start anywhere)
        v //= 2
    bx, by = _last.TILE_UNITS
    tile = bx * v
    stats = max_bits if max_bits is not None else tl.runtime.empty((1,), kd.u32)
    tiles = -(-spatial // tile) * -(-c // tile)
    skippable = gated is not None and gated[2] != _gate.ALWAYS
    z = -(-gated_cubes(t5.runtime.capabilities, tiles * n, skippable) // tiles)   # batch items in z
    _last.to_channels_last[(-(-spatial // tile), -(-c // tile), z), (bx, by)](
        t5.reshape(t5.size), tl, stats.reshape(stats.size), n, c, spatial, v, max_bits is not None,
        *(gated or _ungated(stats)), z < n)
    return tl


def _backward_channels_last(x5, g5, go5, grad_grid, dx, max_bits, points: int, locations: int,
                            o: GridSampleOptions, dims: int, room: int, group: int) -> None:
    """The channels-last backward (backward_last.py, where tuning.backward_group picks it):
    input and out_grad copied to channels last, `group` units a grid point scatter into
    [N, S, C] 64-bit words, then one pass converts them to dx [N, C, *S]."""
    rt = x5.runtime
    n, c = x5.shape[:2]
    spatial = x5.size // (n * c)
    staged = backward_staged_channels(c, group)   # out_grad through shared memory, not copied
    if staged:
        _abs_max(go5, max_bits)
    gl = go5.reshape(go5.size) if staged else _to_channels_last(go5, max_bits)
    acc, flags = rt.zeros((x5.size,), kd.i64), rt.empty((x5.size,), kd.u32)
    _bwd_last.clear_flags[cubes(x5.size), UNITS](flags, max_bits, x5.size)
    _bwd_last.backward_channels_last[-(-points // (UNITS // group)), UNITS](
        _to_channels_last(x5), g5.reshape(g5.size), gl, grad_grid.reshape(grad_grid.size), acc, flags, max_bits,
        points, locations, c, *x5.shape[2:], *_runtime_options(o), o.mode.value, dims, room, group, staged, True,
        *_ungated(max_bits), False)
    bx, by = _bwd_last.FINISH_UNITS
    _bwd_last.finish_channels_last[(-(-spatial // bx), -(-c // bx), n), (bx, by)](
        acc, flags, max_bits, dx.reshape(dx.size), c, spatial, room)


def _backward_gather(x5, g5, go5, grad_grid, dx, max_bits, points: int, locations: int, o: GridSampleOptions,
                     dims: int, room: int, k: int) -> None:
    """The gathered backward (backward_gather.py, where tuning.backward_gather_channels picks
    it): the grid gradient by backward_last's kernel with its scatter off, then the grid points
    bucketed by cell and dx summed a pixel and K channels a unit (no atomics on its values).
    BACKWARD_GATHER_GRID_DIRECT: the grid gradient by sample.py's kernel instead (scatter off),
    and the gather reads out_grad [N, C, points]: no channels-last copies at all.
    BACKWARD_GATHER_CHOOSE: both forms launched, gated (gate.py): the device runs the form
    without copies where the grid is smooth, the other where it is not (their walks of the
    lists in one launch of the gather)."""
    rt = x5.runtime
    n, c = x5.shape[:2]
    spatial = x5.size // (n * c)
    group = backward_gather_group(c)
    sizes = tuple(x5.shape[2:])
    opts = (*_runtime_options(o), o.mode.value, dims)
    none64, none32, none_i32 = rt.empty((1,), kd.i64), rt.empty((1,), kd.u32), rt.empty((1,), kd.i32)
    grid = g5.reshape(g5.size)
    choose = _tuning.BACKWARD_GATHER_CHOOSE and not _tuning.BACKWARD_GATHER_GRID_DIRECT
    smooth, rough = _rough_gate(g5, points, sizes, opts) if choose else (_ungated(max_bits),) * 2
    walks = []   # (out_grad as the gather reads it, its point and channel strides, vector, gate)
    if _tuning.BACKWARD_GATHER_GRID_DIRECT or choose:   # no copies: a unit a point reads [N, C, *S]
        _sample.sample_backward[cubes(points), UNITS](   # (and finds max |out_grad| as it reads it)
            x5, g5, go5, as_5d(grad_grid, dims, 1), none32, none_i32, none32, max_bits, points, *opts, room, UNITS,
            False, *smooth, True, _tuning.GRID_GRAD_CHANNELS)
        walks.append((go5.reshape(go5.size), (1, locations), 1, smooth))
    if not _tuning.BACKWARD_GATHER_GRID_DIRECT:
        staged = backward_staged_channels(c, group)   # out_grad through shared memory, not copied
        if staged:
            _abs_max(go5, max_bits, rough)
        gl = go5.reshape(go5.size) if staged else _to_channels_last(go5, max_bits, rough)
        full = -(-points // (UNITS // group))
        blocks = gated_cubes(rt.capabilities, full, choose)   # (fewer: the kernel loops over the blocks)
        _bwd_last.backward_channels_last[blocks, UNITS](
            _to_channels_last(x5, gated=rough), grid, gl, grad_grid.reshape(grad_grid.size), none64, none32,
            max_bits, points, locations, c, *sizes, *opts, room, group, staged, False, *rough, blocks < full)
        if _tuning.BACKWARD_GATHER_LAST and not staged:   # out_grad's channels-last copy, K consecutive channels a point
            walks.append((gl, (c, 1), backward_gather_vector(k, x5.dtype.itemsize), rough))
        else:
            walks.append((go5.reshape(go5.size), (1, locations), 1, rough))
    cells = gather_cells(o.mode, dims, sizes)
    total = n * cells
    blocks = cubes(total)
    counts, cursor = rt.zeros((total,), kd.u32), rt.zeros((total,), kd.u32)
    local, sums, offsets = rt.empty((total,), kd.u32), rt.empty((blocks,), kd.u32), rt.empty((blocks + 1,), kd.u32)
    record = _gather.record_words(o.mode.value, _tuning.BACKWARD_GATHER_RECORDS)
    lists = rt.empty((points * max(1, record),), kd.i32)
    _gather.count_cells[cubes(points), UNITS](grid, counts, points, locations, cells, *sizes, *opts)
    _gather.block_scan[blocks, UNITS](counts, local, sums, total)
    exclusive_scan[1, SCAN_UNITS](sums, offsets, blocks, False, 1)
    _gather.fill_cells[cubes(points), UNITS](grid, cursor, local, offsets, lists, points, locations, cells, *sizes,
                                             *opts, UNITS, record)
    (go, strides, v, gated), (go_b, strides_b, v_b, _) = walks[0], walks[-1]   # (both forms: one launch)
    _gather.gather_input_grad[(cubes(spatial), c // k, n), UNITS](
        grid, go, counts, local, offsets, lists, max_bits, dx.reshape(dx.size), c, locations, cells, *sizes,
        *strides, *opts, room, k, v, max(1, min(10, _tuning.BACKWARD_GATHER_FLAGS)), UNITS,
        _tuning.BACKWARD_GATHER_FINITE_PATH, record, _tuning.BACKWARD_GATHER_FLAT, *gated, go_b, *strides_b, v_b,
        len(walks) == 2)


def _sample_channels_last(x5, g5, out, points: int, locations: int, o: GridSampleOptions, dims: int,
                          lanes: int, gated=None) -> None:
    """The channels-last forward (channels_last.py, where tuning.channels_last_lanes picks it):
    x5 [N, C, D, H, W] copied to [N, D·H·W, C], then sampled by C / (lanes·vectors) units a
    point. gated: (gate, limit, WHEN) of gate.py for both launches, else they always run."""
    n, c = x5.shape[:2]
    xl = _to_channels_last(x5, gated=gated)
    vecs = channels_last_vectors(c, lanes)
    groups = c // (lanes * vecs)
    _last.sample_channels_last[-(-points // (UNITS // groups)), UNITS](
        xl, g5.reshape(g5.size), out.reshape(out.size), points, locations, *x5.shape[2:], *_runtime_options(o),
        o.mode.value, dims, lanes, vecs, groups, *(gated or _ungated(xl.runtime.empty((1,), kd.u32))))


def _sample_chunks(x5, g5, out, points: int, locations: int, o: GridSampleOptions, dims: int, k: int, area: int,
                   gated=None) -> None:
    """chunks.sample_chunks: k channels a unit, all at once in planes whose taps lie within
    `area` pixels a lane (0: a channel at a time). gated: as `_sample_channels_last`."""
    chunks = -(-x5.shape[1] // k)
    _chunks.sample_chunks[cubes(points) * chunks, UNITS](
        x5.reshape(x5.size), g5.reshape(g5.size), out.reshape(out.size), points, locations, x5.shape[1], chunks,
        *x5.shape[2:], *_runtime_options(o), o.mode.value, dims, k, area,
        *(gated or _ungated(x5.runtime.empty((1,), kd.u32))))


def _rows_of(x5, plan) -> kd.Tensor:
    """lanes_last.to_rows: x5 [N, C, *S] copied to channels-last F32 rows [N·S + 1, C]
    (flat), the last row zeros."""
    n, c = x5.shape[:2]
    spatial = x5.size // (n * c)
    xl = x5.runtime.empty(((n * spatial + 1) * c,), kd.f32)
    flat = x5.reshape(x5.size)
    block, vec = _tuning.rows_copy(c, spatial, flat.offset, plan.span)
    _lanes_last.to_rows[(-(-spatial // plan.span), 1, n), 1](flat, xl, c, spatial, plan.span, block, vec)
    return xl


def _forward_lanes(x5, g5, out, y5, o: GridSampleOptions, dims: int, plan) -> None:
    """The forward of lanes.py (tuning.lane_plan): a cube plan.bx points of an output row,
    each tap's channels gathered from x5."""
    _lanes.forward_lanes[_lane_grid(y5, plan), plan.bx](
        x5.reshape(x5.size), g5.reshape(g5.size), out.reshape(out.size), *_lane_sizes(x5, y5),
        *_runtime_options(o), o.mode.value, dims, plan.exact, plan.bx)


def _forward_lanes_last(x5, g5, out, locations: int, o: GridSampleOptions, dims: int, plan) -> None:
    """The forward of lanes_last.py (tuning.lane_last_plan): x5 copied to channels-last rows,
    then forward_last, plan.points grid points and plan.units·plan.vectors channels a cube."""
    n, c = x5.shape[:2]
    xl = _rows_of(x5, plan)
    spatial = x5.size // (n * c)
    pad, align = _runtime_options(o)
    _lanes_last.forward_last[(-(-locations // plan.points), plan.blocks, n), plan.units](
        xl, g5.reshape(g5.size), out.reshape(out.size), c, locations, *x5.shape[2:], n * spatial, pad, align,
        o.mode.value, dims, TAPS[o.mode] ** dims, plan.points, plan.vectors, locations % plan.points == 0)


def _backward_lanes_last(x5, g5, go5, grad_grid, dx, locations: int, o: GridSampleOptions, dims: int, plan) -> None:
    """The backward of lanes_last.py: input and out_grad copied to channels-last rows, the
    grid gradient (grid_grad_last, which also writes every point's taps), then the input
    gradient scattered in point order into an F32 channels-last scratch (scatter_last)."""
    rt = x5.runtime
    n, c = x5.shape[:2]
    spatial = x5.size // (n * c)
    taps = TAPS[o.mode] ** dims
    xl, gl = _rows_of(x5, plan), _rows_of(go5, plan)
    tap_at, tap_w = rt.empty((n * locations * taps,), kd.i32), rt.empty((n * locations * taps,), kd.f32)
    pad, align = _runtime_options(o)
    _lanes_last.grid_grad_last[(-(-locations // plan.points), 1, n), plan.units](
        xl, gl, g5.reshape(g5.size), grad_grid.reshape(grad_grid.size), tap_at, tap_w, c, locations, *x5.shape[2:],
        pad, align, o.mode.value, dims, taps, plan.points, locations % plan.points == 0)
    acc = rt.empty((n * (spatial + 1) * c,), kd.f32)
    _lanes_last.scatter_last[(1, plan.blocks, n), plan.units](gl, tap_at, tap_w, acc, dx.reshape(dx.size), c,
                                                               locations, spatial, taps, plan.vectors)


def _lane_plan(rt, x5, y5, o: GridSampleOptions, dims: int):
    """tuning.lane_plan for 5-D views x5 (input) and y5 (output or out_grad)."""
    return lane_plan(rt.capabilities, o.mode, dims, x5.size // (x5.shape[0] * x5.shape[1]),
                     y5.size // (y5.shape[0] * y5.shape[1]), x5.shape[1])


def _lane_grid(y5, plan) -> int:
    """lanes.py's cubes: BX points a cube, the points of a batch item in whole cubes."""
    return y5.shape[0] * -(-(y5.size // (y5.shape[0] * y5.shape[1])) // plan.bx)


def _lane_sizes(x5, y5) -> tuple:
    """lanes.py's run-time sizes: channels, grid points a batch item, D, H, W."""
    return (x5.shape[1], y5.size // (y5.shape[0] * y5.shape[1]), *x5.shape[2:])


def _runtime_options(o: GridSampleOptions) -> tuple:
    """The padding mode's code (coords.ZEROS/BORDER/REFLECTION) and align_corners as 0/1:
    run-time kernel arguments, so one compiled kernel serves all six combinations."""
    return list(GridSamplePaddingMode).index(o.padding_mode), int(o.align_corners)
