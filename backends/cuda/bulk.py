"""Arrival barriers (`mbarrier`) and bulk tensor copies (TMA) for devices with
`Capabilities.bulk_copy` (sm_90 and newer), mixed into CudaRenderer.

A bulk copy reads its source through a tensor map: one per (tensor, box rows, swizzle) the
kernel copies, passed by value as a `__grid_constant__` kernel argument of kind 'tmap' that
the runtime encodes at launch (runtime.py, tensor_maps.py). The box is one band of the
group-tile layout (kerneldsl/tile_layout.py: 16 columns, 32 bytes, with the 32-byte swizzle;
64 columns, 128 bytes, with the 128-byte one) by `rows`, so each copy lands as one band
(kd.tile_offset); a copy of `cols` columns is one box a band.
"""
from __future__ import annotations

from kerneldsl import ir, tile_layout

from ..clike import KernelArg
TMAP_STRUCT = "struct __align__(64) kd_tmap { unsigned long long v[16]; };"


class BulkCopies:
    """Renderer hooks for ir.BarrierInit/Arrive/Wait and ir.BulkCopy, and the tensor-map arguments."""

    def _setup_tensor_maps(self):
        """Give every (tensor, box rows, swizzle) of the kernel's bulk copies a map argument."""
        self.tensor_maps = {}  # (tensor name, rows, swizzle) -> map index
        self.bulk_stores = False  # the kernel writes tensors from shared memory by bulk stores
        for s in ir.walk_stmts(self.k.body):
            if isinstance(s, ir.BulkCopy):
                self.tensor_maps.setdefault((s.src, s.rows, s.swizzle), len(self.tensor_maps))
            elif isinstance(s, ir.BulkStore):
                self.tensor_maps.setdefault((s.dst, s.rows, s.swizzle), len(self.tensor_maps))
                self.bulk_stores = True

    def tensor_map_args(self) -> list:
        params = {p.name: p for p in self.k.tensor_params()}
        return [KernelArg("tmap", f"kd_map{j}", params[src], j) for (src, _, _), j in self.tensor_maps.items()]

    def tensor_map_boxes(self) -> list:
        """[parameter index, box rows, swizzle] per map argument, in map order (the runtime
        encodes them)."""
        params = {p.name: p for p in self.k.tensor_params()}
        return [[params[src].index, rows, swizzle] for (src, rows, swizzle) in self.tensor_maps]

    def _bar(self, array: str, index) -> str:
        return f"(unsigned)__cvta_generic_to_shared({self.shared(array)} + ({self.x(index)}))"

    def s_barrier_init(self, s):
        self.emit(f'asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"({self._bar(s.array, s.index)}), '
                  f'"r"({self.x(s.count)}) : "memory");')
        # make the set-up barrier visible to the copy engine (the async proxy) as well
        self.emit('asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')

    def s_barrier_arrive(self, s):
        bar = self._bar(s.array, s.index)
        if s.nbytes is None:
            self.emit(f'asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"({bar}) : "memory");')
        else:
            self.emit(f'asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"({bar}), '
                      f'"r"({self.x(s.nbytes)}) : "memory");')

    def s_barrier_wait(self, s):
        # try_wait gives up after a time limit of the hardware's: ask again until the phase is
        # done. The loop stays inside the asm (its labels are local to the braces): a C loop
        # here, between a group product's issue and its wait, made ptxas serialise wgmma
        self.emit(f'asm volatile("{{ .reg .pred kd_p; kd_wait: mbarrier.try_wait.parity.shared::cta.b64 kd_p, [%0], %1; '
                  f'@!kd_p bra kd_wait; }}" :: "r"({self._bar(s.array, s.index)}), "r"({self.x(s.parity)}) : "memory");')

    def s_bulk_copy(self, s):
        self.need("kd_tmap")
        j = self.tensor_maps[(s.src, s.rows, s.swizzle)]
        lines = [f"const unsigned kd_sa = (unsigned)__cvta_generic_to_shared({self.shared(s.dst)} + "
                 f"({self.x(s.dst_offset)}));",
                 f"const unsigned kd_ba = {self._bar(s.barriers, s.index)};",
                 f"const int kd_r = {self.x(s.row)}, kd_c = {self.x(s.col)};"]
        w = tile_layout.band_width(s.swizzle)
        band_bytes = s.rows * w * s.dtype.itemsize
        for band in range(s.cols // w):
            lines.append('asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx'
                         '::bytes [%0], [%1, {%2, %3}], [%4];" :: '
                         f'"r"(kd_sa + {band * band_bytes}u), "l"((unsigned long long)&kd_map{j}), '
                         f'"r"(kd_c + {band * w}), "r"(kd_r), "r"(kd_ba) : "memory");')
        self.emit("{ " + " ".join(lines) + " }")

    # the copy engine reads shared memory through the async proxy: units' own writes of a
    # store's source are made visible to it by a proxy fence, which every unit runs before
    # each barrier in a kernel with bulk stores (and the issuing unit before the store)
    PROXY_FENCE = 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'

    def s_bulk_store(self, s):
        self.need("kd_tmap")
        j = self.tensor_maps[(s.dst, s.rows, s.swizzle)]
        lines = [self.PROXY_FENCE,
                 f"const unsigned kd_sa = (unsigned)__cvta_generic_to_shared({self.shared(s.src)} + "
                 f"({self.x(s.src_offset)}));",
                 f"const int kd_r = {self.x(s.row)}, kd_c = {self.x(s.col)};"]
        w = tile_layout.band_width(s.swizzle)
        band_bytes = s.rows * w * s.dtype.itemsize
        t = self.tensor(s.dst)
        src = f"({self.shared(s.src)} + ({self.x(s.src_offset)}))"
        for band in range(s.cols // w):
            # the copy engine stops with an illegal instruction on a store box that starts
            # before the tensor: such a band is written by this unit, element by element, the
            # part inside the tensor (the emulations' semantics)
            lines.append(f"if (kd_r >= 0 && kd_c + {band * w} >= 0) "
                         'asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" :: '
                         f'"l"((unsigned long long)&kd_map{j}), "r"(kd_c + {band * w}), "r"(kd_r), '
                         f'"r"(kd_sa + {band * band_bytes}u) : "memory");')
            inner = tile_layout.c_offset("kd_er", f"({band * w} + kd_ec)", s.rows, s.swizzle)
            lines.append(f"else for (int kd_e = 0; kd_e < {s.rows * w}; ++kd_e) {{ "
                         f"const int kd_er = kd_e / {w}, kd_ec = kd_e % {w}, "
                         f"kd_gr = kd_r + kd_er, kd_gc = kd_c + {band * w} + kd_ec; "
                         f"if (kd_gr >= 0 && kd_gr < {t}_s0 && kd_gc >= 0 && kd_gc < {t}_s1) "
                         f"{t}[kd_gr * {t}_st0 + kd_gc * {t}_st1] = {src}[{inner}]; }}")
        lines.append('asm volatile("cp.async.bulk.commit_group;" ::: "memory");')
        self.emit("{ " + " ".join(lines) + " }")

    def s_bulk_store_wait(self, s):
        self.emit('asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");')
