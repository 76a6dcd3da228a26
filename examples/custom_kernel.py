"""A block reduction written with plane operations, shared memory and atomics.

Each cube sums a strided slice of the input: every unit accumulates privately, planes
combine with `plane_sum`, one value per plane goes through shared memory, and the
cube's total is added to the global result with an atomic. A second kernel counts
the positive values per bucket with shared-memory atomics (a histogram).

Run:  python examples/custom_kernel.py
"""
import numpy as np

import kerneldsl as kd


@kd.kernel
def total(x: kd.Tensor[kd.f32], result: kd.Tensor[kd.f32], n: kd.i32, BLOCK: kd.Const[int]):
    t = kd.unit_pos_x()
    stride = kd.cube_count_x() * BLOCK
    acc = kd.f32(0)
    for i in range(kd.cube_pos_x() * BLOCK + t, n, stride):
        acc += x[i]
    acc = kd.plane_sum(acc)                                  # one sum per plane
    partial = kd.shared(kd.f32, kd.plane_count())
    if kd.plane_elect():
        partial[kd.plane_pos()] = acc
    kd.sync_cube()
    if t == 0:
        cube_sum = kd.f32(0)
        for p in kd.unroll(kd.plane_count()):
            cube_sum += partial[p]
        kd.atomic_add(result, 0, cube_sum)                    # cubes meet in global memory


@kd.kernel
def bucket_counts(x: kd.Tensor[kd.f32], counts: kd.Tensor[kd.u32], n: kd.i32, BUCKETS: kd.Const[int]):
    t = kd.unit_pos_x()
    local = kd.shared(kd.u32, BUCKETS)
    if t < BUCKETS:
        local[t] = 0
    kd.sync_cube()
    i = kd.cube_pos_x() * kd.cube_dim_x() + t
    if i < n and x[i] > 0.0:
        b = kd.min(kd.i32(x[i] * BUCKETS), BUCKETS - 1)
        kd.atomic_add(local, b, 1)
    kd.sync_cube()
    if t < BUCKETS:
        kd.atomic_add(counts, t, local[t])


def main():
    rt = kd.runtime()
    host = np.random.default_rng(0).uniform(-1, 1, 2_000_017).astype(np.float32)
    x = rt.tensor(host)
    result = rt.zeros(1, kd.f32)
    total[64, 256](x, result, x.shape[0], 256)
    ref = host.astype(np.float64).sum()
    print(f"sum on {rt.name}: {result.numpy()[0]:.4f}   numpy (f64): {ref:.4f}")

    counts = rt.zeros(10, kd.u32)
    bucket_counts[(x.shape[0] + 255) // 256, 256](x, counts, x.shape[0], 10)
    ref_counts = np.histogram(host[host > 0], bins=10, range=(0, 1))[0]
    print("bucket counts:", counts.numpy().tolist())
    assert abs(result.numpy()[0] - ref) < 1e-2 * max(1.0, abs(ref)) + 1.0
    assert (counts.numpy() == ref_counts).all()
    print("ok")


if __name__ == "__main__":
    main()
