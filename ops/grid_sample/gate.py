"""A choice between two forms of a call (the gathered backward, the forward) made on the
device, from the grid.

The gathered backward's best form depends on the grid, which lies on the device: on a smooth
grid (affine warps, resizes) the form with no channels-last copies reads [N, C, *S] input and
out_grad in whole lines and skips two copies of the input's size; on a random grid every tap
of that form reads its own sectors and the copies pay for themselves many times over (H100
[32, 64, 256²] f32: 1.65 against 2.41 ms on an affine grid, 5.17 against 2.61 on a random
one). `backward_gather.count_rough` counts the grid's rough steps (a point whose first taps lie more than
ROUGH_STEP pixels from the previous point's, summed over the axes) into gate[0]; the kernels
of both forms are then launched, each with a WHEN constant, and return at once where
`gate_open` says the other form was chosen (the gather, whose cubes are many, takes both
forms' walks in one launch and picks one). The grid is smooth where at most `limit` steps
are rough (`rough_limit`). Every unit of a cube reads the same gate word, so a kernel's
barriers stay under a cube-uniform condition.

The forward chooses the same way between the channels-last form (transpose, then vector
taps) and chunks.py's form, which reads [N, C, *S] where it lies (tuning.FORWARD_CHOOSE_CHANNELS)."""
from __future__ import annotations

import kerneldsl as kd

ALWAYS = 0        # WHEN: the kernel runs whatever the gate says (gate and limit are not read)
IF_SMOOTH = 1     # it runs where the grid is smooth
IF_ROUGH = 2      # it runs where it is not
ROUGH_STEP = 2    # pixels between neighbouring points' first taps (|dx| + |dy| + |dz|) a smooth step allows


def rough_limit(points: int) -> int:
    """Rough steps a smooth grid of `points` points may have: one in eight (plain Python)."""
    return points // 8


@kd.func
def gate_open(gate, limit, WHEN):
    """Whether a kernel launched with WHEN runs, given count_rough's gate and the limit."""
    if WHEN == ALWAYS:
        run = True
    elif WHEN == IF_SMOOTH:
        run = gate[0] <= kd.u32(limit)
    else:
        run = gate[0] > kd.u32(limit)
    return run
