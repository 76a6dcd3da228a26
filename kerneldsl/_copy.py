"""`Tensor.contiguous()` on every runtime: a strided gather written in the DSL itself."""
from __future__ import annotations

from . import lang as kd_lang
from .dtypes import i64
from .kernel import kernel

BLOCK = 256


@kernel
def _strided_copy(src: kd_lang.Tensor, dst: kd_lang.Tensor, n: i64, NDIM: kd_lang.Const[int]):
    i = kd_lang.cube_pos_x() * kd_lang.cube_dim_x() + kd_lang.unit_pos_x() + \
        i64(kd_lang.cube_pos_y()) * kd_lang.cube_count_x() * kd_lang.cube_dim_x()
    if i < n:
        if NDIM == 1:
            dst[i] = src[i]
        else:
            rem = i
            off = i64(0)
            for d in kd_lang.unroll(NDIM - 1, -1, -1):
                size = i64(src.shape[d])
                off += (rem % size) * src.stride(d)
                rem = rem // size
            dst[i] = src[off]  # one index on a multi-dim tensor: element offset from its base


def strided_copy(src, dst):
    n = src.size
    cubes = -(-n // BLOCK)
    gx = min(cubes, 65535)
    gy = -(-cubes // gx)
    _strided_copy[(gx, gy), BLOCK](src, dst.reshape(-1) if dst.ndim != 1 else dst, n, src.ndim)
