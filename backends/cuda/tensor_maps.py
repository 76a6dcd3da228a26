"""Tensor maps of kd.bulk_copy sources: encoded by the driver (cuTensorMapEncodeTiled) from
a 2-D tensor and a box of one band of the group-tile layout by `rows` (16 columns with the
32-byte swizzle, 64 with the 128-byte one: kerneldsl/tile_layout.py, bulk.py), zeros outside
the tensor. Kept per (address, shape, strides, box, swizzle): a launch on the same tensor
reuses its map, so encoding costs only the first time."""
from __future__ import annotations

from collections import OrderedDict

from kerneldsl import tile_layout
from kerneldsl.dtypes import bf16, f16
from kerneldsl.errors import LaunchError
from kerneldsl.launch_checks import check_bulk_source

KEEP = 512  # maps kept (least recently used dropped first)


class TensorMaps:
    """Host copies of encoded tensor maps; `address` gives one's 128 bytes for a launch."""

    def __init__(self, driver):
        self.driver = driver
        self.maps: OrderedDict = OrderedDict()
        d = driver
        self.dtypes = {bf16: d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                       f16: d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}
        self.swizzles = {32: d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                         128: d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}

    def address(self, t, rows: int, swizzle: int, kernel: str, param: str) -> int:
        """The host address of the map for tensor `t` (kernel parameter `param`) and a box of
        `rows` rows of one band of the `swizzle`-byte layout; LaunchError naming the parameter
        where the copy engine cannot read `t`."""
        itemsize = t.dtype.itemsize
        base = t.buffer.raw + t.offset * itemsize
        key = (base, t.shape, t.strides, t.dtype, rows, swizzle)
        found = self.maps.get(key)
        if found is not None:
            self.maps.move_to_end(key)
            return found.getPtr()
        check_bulk_source(t, kernel, param)
        d = self.driver
        u64, u32 = d.cuuint64_t, d.cuuint32_t
        err, tmap = d.cuTensorMapEncodeTiled(
            self.dtypes[t.dtype], 2, base, [u64(t.shape[1]), u64(t.shape[0])], [u64(t.strides[0] * itemsize)],
            [u32(tile_layout.band_width(swizzle)), u32(rows)], [u32(1), u32(1)],
            d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, self.swizzles[swizzle],
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        if err != d.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"{kernel}: the driver could not describe tensor {param} (shape {t.shape}, strides "
                              f"{t.strides}) for bulk copies of {rows}-row boxes ({swizzle}-byte swizzle): {err!r}")
        self.maps[key] = tmap
        if len(self.maps) > KEEP:
            self.maps.popitem(last=False)
        return tmap.getPtr()

