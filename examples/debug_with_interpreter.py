"""Finding a shared-memory race with the interpreter runtime.

A transpose through a shared tile that forgot its kd.sync_cube(): the compiled runtimes give
wrong numbers (which ones depends on the runtime and the schedule) and say nothing; the
interpreter runs the kernel unit by unit in Python and names the race, both units and both
lines. With the barrier in place the interpreter's result equals numpy's. See docs/debugging.md.
"""
import numpy as np

import kerneldsl as kd

T = 8  # tile side: a cube of T x T units transposes one T x T tile


@kd.kernel
def transpose_racy(a: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], T: kd.Const[int]):
    tx, ty = kd.unit_pos_x(), kd.unit_pos_y()
    r0, c0 = kd.cube_pos_y() * T, kd.cube_pos_x() * T
    tile = kd.shared(kd.f32, (T, T))
    tile[ty, tx] = a[r0 + ty, c0 + tx]
    out[c0 + ty, r0 + tx] = tile[tx, ty]          # reads another unit's slot: no barrier before it


@kd.kernel
def transpose(a: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], T: kd.Const[int]):
    tx, ty = kd.unit_pos_x(), kd.unit_pos_y()
    r0, c0 = kd.cube_pos_y() * T, kd.cube_pos_x() * T
    tile = kd.shared(kd.f32, (T, T))
    tile[ty, tx] = a[r0 + ty, c0 + tx]
    kd.sync_cube()                                # every unit's write before any unit's read
    out[c0 + ty, r0 + tx] = tile[tx, ty]


def main():
    host = np.random.default_rng(0).standard_normal((2 * T, 3 * T)).astype(np.float32)
    rt = kd.runtime("interpreter")                # or KERNELDSL_INTERPRET=1 for every launch
    a, out = rt.tensor(host), rt.zeros((3 * T, 2 * T))
    try:
        transpose_racy[(3, 2), (T, T)](a, out, T)
        raise SystemExit("the interpreter missed the race")
    except kd.SharedMemoryRaceError as e:
        print("found:", e)
    transpose[(3, 2), (T, T)](a, out, T)
    np.testing.assert_array_equal(out.numpy(), host.T)
    print("fixed: the transpose equals numpy's")
    print("ok")


if __name__ == "__main__":
    main()
