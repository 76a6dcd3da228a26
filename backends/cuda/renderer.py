"""IR -> CUDA C++ for NVRTC, as a dialect of the shared C-like renderer (backends/clike/).

What CUDA changes from the base: `extern "C" __global__` kernels with
`__launch_bounds__`, positions from threadIdx/blockIdx, native plane operations
(`__shfl_*_sync`, `__ballot_sync`, `__reduce_*_sync`, shuffle-up scans, with the
exact mask of a partial last plane), native atomics, the matrix primitive on
tensor cores (`mma.sync` m16n8k16 pairs, `ldmatrix` from shared memory), and
dynamic shared memory when a kernel needs more than the 48 KiB static limit.
The helpers live in templates/prelude.cuh, so the source needs no CUDA headers.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kerneldsl import ir, tile_layout
from kerneldsl.dtypes import bf16, boolean, f16, f32, f64, i32, i64, u32
from kerneldsl.errors import UnsupportedFeatureError

from ..clike import STATEMENT_HANDLERS, CLikeRenderer, Rendered
from .bulk import TMAP_STRUCT, BulkCopies
from .capabilities import STATIC_SHARED_LIMIT, WARP
from .role_copies import role_copies

_ATOMIC_FN = {"add": "atomicAdd", "min": "atomicMin", "max": "atomicMax", "exchange": "atomicExch",
              "and": "atomicAnd", "or": "atomicOr", "xor": "atomicXor", "cas": "atomicCAS"}
_BITS = {f32: ("__float_as_int", "__int_as_float"), f64: ("__double_as_longlong", "__longlong_as_double")}
_REDUCE_NATIVE = {"sum": "__reduce_add_sync", "min": "__reduce_min_sync", "max": "__reduce_max_sync"}


@dataclass
class CudaRendered(Rendered):
    """A rendered kernel plus what the CUDA runtime needs at load and launch."""
    dynamic_shared: int = 0  # bytes of dynamic shared memory to ask for (0: all static)
    filename: str = "kernel.cu"  # the source's name in NVRTC messages outside #line regions
    tensor_maps: list = None  # [parameter index, box rows, swizzle] per 'tmap' argument (bulk.py)


class CudaRenderer(BulkCopies, CLikeRenderer):
    dialect = "cuda"
    kernel_prefix = 'extern "C" __global__ void'
    helper_prefix = "static __device__ __forceinline__"
    global_ptr = ""
    local_ptr = ""
    local_decl = "__shared__ __align__(16)"
    volatile_atomics = True
    pass_tensor_offset = False
    i64_suffix = "LL"
    barrier_stmt = "__syncthreads();"
    local_barrier_stmt = "__syncthreads();"
    native_planes = True
    plane_fence = "__syncwarp(kd_mask);"  # shuffles exchange registers but order no memory
    template_dirs = (str(Path(__file__).resolve().parent / "templates"),)
    template_name = "kernel.cu.j2"
    STATEMENT_HANDLERS = {**STATEMENT_HANDLERS, ir.AsyncCopy: "s_async_copy", ir.AsyncCommit: "s_async_commit",
                          ir.AsyncWait: "s_async_wait", ir.BarrierInit: "s_barrier_init",
                          ir.BarrierArrive: "s_barrier_arrive", ir.BarrierWait: "s_barrier_wait",
                          ir.BulkCopy: "s_bulk_copy", ir.BulkStore: "s_bulk_store",
                          ir.BulkStoreWait: "s_bulk_store_wait"}

    def __init__(self, k: ir.KernelIR, caps):
        if caps.bulk_copy:  # roles run natively: one copy of the code per role (role_copies.py)
            k = role_copies(k)
        super().__init__(k, caps)
        if k.plane_dim != WARP:
            raise UnsupportedFeatureError(f"the cuda back end runs planes of {WARP} lanes, got PLANE_DIM "
                                          f"{k.plane_dim}", k.loc)
        if k.frags and self.U % WARP:
            raise UnsupportedFeatureError(
                f"{k.name}: matrix fragments run on tensor cores, which need whole planes: use a multiple of "
                f"{WARP} units per cube on {caps.device_name}, got {self.U}", k.loc)
        self.dynamic = sum(d.dtype.itemsize * d.size for d in k.shared.values()) > STATIC_SHARED_LIMIT
        self.group_products = ir.contains(k.body, ir.GroupMma)
        self._setup_tensor_maps()
        # swizzled tiles (kd.group_mma): the swizzle reads address bits 4-7 (32-byte layout) or
        # 4-9 (128-byte layout) of each array, so an array starts on its pattern's period (256 or
        # 1024 bytes); bulk copies want arrays on 1024-byte boundaries too
        wide = any(t is not None and t.swizzle == 128 for s in ir.walk_stmts(k.body) if isinstance(s, ir.GroupMma)
                   for t in (s.a_tile, s.b_tile))
        self.shared_align = 1024 if self.tensor_maps or wide else 256 if self.group_products else 16
        self.local_decl = f"__shared__ __align__({self.shared_align})"
        # wgmma and bulk stores read shared memory through the async proxy: order the cube's
        # earlier writes (stores, cp.async) before them at every barrier
        self.proxy_fence = (caps.group_mma_native and self.group_products) or self.bulk_stores
        if self.proxy_fence:
            self.barrier_stmt = f"{self.PROXY_FENCE} __syncthreads();"

    # ------------------------------------------------------------------ skeleton
    def kernel_args(self) -> list:
        return super().kernel_args() + self.tensor_map_args()

    def arg_decl(self, a) -> str:
        if a.kind == "tmap":  # the map by value, read by the copy engine from the parameter space
            return f"const __grid_constant__ kd_tmap {a.cname}"
        return super().arg_decl(a)

    def kernel_attributes(self) -> str:
        if self._register_roles():  # the pool roles trade registers in: all of it, one cube an SM
            return f"__launch_bounds__({self.U}, 1) "
        if self.k.min_cubes > 1:  # kd.cubes_per_compute_unit: ptxas caps the registers to fit them
            return f"__launch_bounds__({self.U}, {self.k.min_cubes}) "
        return f"__launch_bounds__({self.U}) "

    def _register_roles(self) -> list:
        return [s for s in ir.walk_stmts(self.k.body) if isinstance(s, ir.Role) and s.registers is not None]

    def launch_registers(self) -> int:
        """Registers a unit starts with where roles set budgets: its share of the register
        file, in steps of 8 (what `__launch_bounds__(units, 1)` gives)."""
        return min(255, 65536 // self.U) // 8 * 8

    def s_barrier(self, s):
        if s.role is None or not self.caps.bulk_copy:  # (emulated roles reach every barrier: flat)
            super().s_barrier(s)
            return
        if self.proxy_fence:
            self.emit(self.PROXY_FENCE)
        # kd.sync_role(): a named barrier (ids 1..15; 0 is __syncthreads) of the role's units
        ranges = sorted({x.role for x in ir.walk_stmts(self.k.body) if isinstance(x, ir.Barrier) and x.role})
        if len(ranges) > 15:
            raise UnsupportedFeatureError("cuda renderer: more than 15 roles with kd.sync_role()", s.loc)
        self.emit(f'asm volatile("bar.sync {1 + ranges.index(s.role)}, {s.role[1]};" ::: "memory");')

    def role_guard(self, s) -> str:
        """The unit's group read through a warp broadcast, so that ptxas knows the role's
        branch is uniform over each warp (a plain comparison of the unit index left the
        group products in it serialised: ptxas C7518)."""
        group = self.k.plane_dim * ir.GROUP_PLANES
        first, end = s.first_unit // group, (s.first_unit + s.units) // group
        g = f"__shfl_sync(0xffffffffu, (int)((unsigned)kd_unit / {group}u), 0)"
        return f"{g} >= {first} && {g} < {end}" if first else f"{g} < {end}"

    def role_entry(self, s) -> list:
        """A role's register budget: give registers back (setmaxnreg.dec) or take them from
        what other roles gave back (setmaxnreg.inc, which waits for them)."""
        if s.registers is None or s.registers == self.launch_registers():
            return []
        op = "inc" if s.registers > self.launch_registers() else "dec"
        return [f'asm volatile("setmaxnreg.{op}.sync.aligned.u32 {s.registers};" ::: "memory");']

    def position(self, kind: str, axis: int) -> str:
        c = "xyz"[axis]
        return {"cube_pos": "blockIdx", "cube_count": "gridDim", "unit_pos": "threadIdx"}[kind] + "." + c

    def plane_setup(self) -> list:
        full, tail = divmod(self.U, WARP)
        # the plane index through an unsigned shift, so the compiler knows it is never negative:
        # `plane // 4` is then a shift too. With the signed form, a group index computed from it
        # made ptxas serialise every wgmma of a loop (warning C7514, benchmarks/RESULTS.md)
        out = ["const int kd_plane = (int)((unsigned)kd_unit >> 5);", "const int kd_lane = kd_unit & 31;"]
        if tail == 0:
            out += ["const int kd_nlanes = 32;", "const unsigned kd_mask = 0xffffffffu;"]
        else:  # the last plane is partial: its mask names only the lanes that exist
            out += [f"const int kd_nlanes = kd_plane == {full} ? {tail} : 32;",
                    f"const unsigned kd_mask = kd_plane == {full} ? {hex((1 << tail) - 1)}u : 0xffffffffu;"]
        return out

    def prologue(self) -> list:
        lines = super().prologue()
        if not self.dynamic:
            return lines
        # more than 48 KiB: one dynamic buffer (sized at launch), carved into the arrays
        decls = {f"{self.local_decl} {self.mem_type_names[d.dtype]} {self.shared(n)}[{d.size}];": (n, d)
                 for n, d in self.k.shared.items()}
        out = [f"extern {self.local_decl} unsigned char kd_smem[];"]
        offset = 0
        for line in lines:
            if line not in decls:
                out.append(line)
                continue
            n, d = decls[line]
            mt = self.mem_type_names[d.dtype]
            out.append(f"{mt}* const {self.shared(n)} = ({mt}*)(kd_smem + {offset});")
            offset += -(-d.dtype.itemsize * d.size // self.shared_align) * self.shared_align
        return out

    def dynamic_shared_bytes(self) -> int:
        if not self.dynamic:
            return 0
        a = self.shared_align
        return sum(-(-d.dtype.itemsize * d.size // a) * a for d in self.k.shared.values())

    # ------------------------------------------------------------------ values
    def bitcast(self, x: str, src, dst) -> str:
        if src.itemsize == 2 and dst.itemsize == 2:
            return x  # f16 <-> bf16: both are 16-bit patterns in registers
        if src.is_float:
            to_int = _BITS[src][0]
            v = f"{to_int}({x})"
            return v if dst in (i32, i64) else self.cast_to(dst, v)
        if dst.is_float:
            t_int = i32 if dst is f32 else i64
            return f"{_BITS[dst][1]}({self.cast_to(t_int, x)})"
        return self.cast_to(dst, x)

    def half_to_float(self, x: str, t) -> str:
        return f"{'kd_bf2f' if t is bf16 else 'kd_h2f'}({x})"

    def float_to_half(self, x: str, t) -> str:
        return f"{'kd_f2bf' if t is bf16 else 'kd_f2h'}({x})"

    def math_call(self, fn: str, args: list, t) -> str:
        if fn == "rsqrt" and t.is_float:
            return f"rsqrt({args[0]})"
        if fn == "exp2_fast":  # one MUFU.EX2: no scaling around it for subnormal results
            return f"{self.need('kd_exp2_fast_' + t.name)}({args[0]})"
        return super().math_call(fn, args, t)

    # ------------------------------------------------------------------ atomics
    def atomic(self, op: str, space: str, ptr: str, value: str, compare, t) -> str:
        p = f"({self.mem_type_names[t]}*){ptr}"  # the atomic intrinsics take plain pointers
        if t is i64:  # add only (capabilities): two's complement, so the unsigned add is the signed one
            return f"(long long)atomicAdd((unsigned long long*){ptr}, (unsigned long long)({value}))"
        if op == "cas":
            return f"atomicCAS({p}, {compare}, {value})"
        return f"{_ATOMIC_FN[op]}({p}, {value})"

    def atomic_cas_i32(self, ptr: str, cmp: str, val: str) -> str:
        return f"atomicCAS((int*){ptr}, {cmp}, {val})"

    # ------------------------------------------------------------------ vectors
    def vec_type(self, elem_ctype: str, lanes: int) -> str:
        return f"kd_vec<{elem_ctype}, {lanes}>"

    def vec_lane(self, x: str, i: int) -> str:
        return f"{x}.v[{i}]"

    def vec_load(self, elem, ptr: str, lanes: int) -> str:
        mt = self.mem_type_names[elem]
        return f"kd_vload<{mt}, {lanes}>((const {mt}*){ptr})"

    def vec_store(self, elem, ptr: str, lanes: list) -> str:
        mt = self.mem_type_names[elem]
        sets = " ".join(f"kd_v.v[{i}] = {x};" for i, x in enumerate(lanes))
        return f"{{ kd_vec<{mt}, {len(lanes)}> kd_v; {sets} kd_vstore<{mt}, {len(lanes)}>(({mt}*){ptr}, kd_v); }}"

    # ------------------------------------------------------------------ helpers
    def helper_code(self, name: str) -> str:
        if name in ("kd_h2f", "kd_f2h", "kd_bf2f", "kd_f2bf"):
            return f"// {name}: in the prelude"
        if name == "kd_exp2_fast_f32":
            return ("static __device__ __forceinline__ float kd_exp2_fast_f32(float x) { float r; "
                    'asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }')
        if name == "kd_tmap":
            return TMAP_STRUCT
        if name == "kd_exp2_fast_f64":
            return "static __device__ __forceinline__ double kd_exp2_fast_f64(double x) { return exp2(x); }"
        if name in ("kd_max_f32", "kd_min_f32"):  # one instruction that keeps NaN (sm_80+)
            op = name[3:6]
            return (f"static __device__ __forceinline__ float {name}(float a, float b) {{ float r; "
                    f'asm("{op}.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }}')
        return super().helper_code(name)

    # ------------------------------------------------------------------ wide shared stores
    def block(self, stmts):
        """The base's statement loop, plus one peephole: lanes 0..n-1 of a vector variable
        stored to consecutive elements of a shared array (`for e in kd.unroll(8):
        s[x + e] = v[e]`) become one 16-byte store where aligned."""
        i = 0
        while i < len(stmts):
            n = self._shared_vector_store(stmts, i)
            if n:
                s0 = stmts[i]
                self._memo = {}
                self.line(s0.loc)
                d = self.k.shared[s0.array]
                base = self._const_split(s0.offset)[0]
                lanes = [self.x(s.value) for s in stmts[i:i + n]]
                self.emit(self.vec_store(d.dtype, f"({self.shared(s0.array)} + {self.x(base)})", lanes))
                i += n
                continue
            s = stmts[i]
            self._memo = {}
            self.line(s.loc)
            self.stmt(s)
            i += 1

    @staticmethod
    def _const_split(e):
        """(x, c) with e == x + c for an integer constant c (through a widening cast)."""
        if isinstance(e, ir.Cast) and e.dtype is i64 and e.a.dtype in (i32, i64):
            e = e.a
        if isinstance(e, ir.BinOp) and e.op == "+" and isinstance(e.b, ir.Const):
            return e.a, int(e.b.value)
        return e, 0

    def _shared_vector_store(self, stmts, i) -> int:
        """How many statements from i form such a vector store (0: none)."""
        s0 = stmts[i]
        if not isinstance(s0, ir.SharedStore) or s0.checked:
            return 0
        v0 = s0.value
        if not (isinstance(v0, ir.VecExtract) and isinstance(v0.a, ir.Var) and v0.lane == 0):
            return 0
        d = self.k.shared[s0.array]
        n = v0.a.dtype.lanes
        if d.dtype is boolean or v0.dtype is not d.dtype or i + n > len(stmts):
            return 0
        base, c = self._const_split(s0.offset)
        if c != 0:
            return 0
        key = self.x(base)
        for k, s in enumerate(stmts[i:i + n]):
            if not (isinstance(s, ir.SharedStore) and not s.checked and s.array == s0.array
                    and isinstance(s.value, ir.VecExtract) and isinstance(s.value.a, ir.Var)
                    and s.value.a.name == v0.a.name and s.value.lane == k):
                return 0
            b, ck = self._const_split(s.offset)
            if ck != k or self.x(b) != key:
                return 0
        return n

    # ------------------------------------------------------------------ async copies
    def s_async_copy(self, s):
        """cp.async global -> shared (L2 only for 16 bytes: `.cg`); a false predicate copies
        0 source bytes, which zero-fills, and points at the tensor's base so no address
        past its end is ever formed."""
        nbytes = s.lanes * s.dtype.itemsize
        src, dst = self.tensor(s.src), self.shared(s.dst)
        soff, doff = self.x(s.src_offset), self.x(s.dst_offset)
        pred = "true" if s.pred is None else self.x(s.pred)
        cache = "cg" if nbytes == 16 else "ca"
        lines = [f"const bool kd_p = {pred};",
                 f"const unsigned kd_sa = (unsigned)__cvta_generic_to_shared({dst} + {doff});",
                 f"const void* kd_g = kd_p ? (const void*)({src} + {soff}) : (const void*){src};",
                 f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;\\n" :: "r"(kd_sa), '
                 f'"l"(kd_g), "r"(kd_p ? {nbytes} : 0) : "memory");']
        if s.checked:
            src_ok = self._check(soff, s.lanes, f"{src}_n", self.param_index(s.src), s.loc)
            dst_ok = self._check(doff, s.lanes, self.literal(self.k.shared[s.dst].size, i64), -1, s.loc)
            lines = [f"if ((!({pred}) || {src_ok}) && {dst_ok}) {{"] + ["    " + x for x in lines] + ["}"]
            self.emit("{ " + " ".join(lines) + " }")
            return
        self.emit("{ " + " ".join(lines) + " }")

    def s_async_commit(self, s):
        self.emit('asm volatile("cp.async.commit_group;\\n" ::: "memory");')

    def s_async_wait(self, s):
        self.emit(f'asm volatile("cp.async.wait_group {s.pending};\\n" ::: "memory");')

    # ------------------------------------------------------------------ plane operations
    def plane_op(self, s: ir.PlaneOp) -> list:
        dst, op, t = self.var(s.dst), s.op, s.dtype
        ctx = "kd_mask, kd_lane"
        if op == "elect":
            return [f"{dst} = (kd_lane == 0);"]
        v = self.x(s.value)
        if op == "ballot":
            return [f"{dst} = __ballot_sync(kd_mask, {v});"]
        if op in ("all", "any"):
            return [f"{dst} = (__{op}_sync(kd_mask, {v}) != 0);"]
        T = self.type_names[t]
        if op in ir.PLANE_REDUCE_OPS:
            if t in (i32, u32) and op in _REDUCE_NATIVE:
                return [f"{dst} = {_REDUCE_NATIVE[op]}(kd_mask, {v});"]
            a, b = "kd_a", "kd_b"
            body = self._combine(op, a, b, t)
            return [f"{dst} = kd_plane_reduce({v}, []({T} {a}, {T} {b}) {{ return {body}; }}, {ctx}, kd_nlanes);"]
        if op == "inclusive_sum":
            return [f"{dst} = kd_plane_scan({v}, {ctx});"]
        if op == "exclusive_sum":
            return [f"{dst} = kd_plane_exscan({v}, {ctx});"]
        a = self.x(s.arg)
        if op == "broadcast":  # lane 0's source lane, like the cpu's; outside the plane -> lane 0
            first = a if isinstance(s.arg, ir.Const) else f"__shfl_sync(kd_mask, (int)({a}), 0)"
            src = [f"int kd_s = {first};", "kd_s = (unsigned)kd_s < (unsigned)kd_nlanes ? kd_s : 0;"]
        elif op == "shuffle":  # source taken modulo PLANE_DIM; outside a partial plane -> own value
            src = [f"int kd_s = (int)({a}) & 31;", "kd_s = kd_s < kd_nlanes ? kd_s : kd_lane;"]
        else:  # shuffle_xor
            src = [f"long long kd_x = (long long)({a}) ^ (long long)kd_lane;",
                   "int kd_s = (kd_x >= 0 && kd_x < kd_nlanes) ? (int)kd_x : kd_lane;"]
        val = f"(int)({v})" if t is boolean else v
        got = f"__shfl_sync(kd_mask, {val}, kd_s)"
        if t is boolean:
            got = f"({got} != 0)"
        return ["{ " + " ".join(src) + f" {dst} = {got}; }}"]

    # ------------------------------------------------------------------ matrix fragments
    def frag_bytes(self) -> int:
        return 0  # fragments live in registers

    @staticmethod
    def frag_regs(ft) -> int:
        """Registers a lane holds: f32 elements of an acc, 16-bit pairs of an a/b fragment."""
        per_lane = ft.rows * ft.cols // WARP
        return per_lane if ft.role == "acc" else per_lane // 2

    def frag_decls(self) -> list:
        out = []
        for n, ft in self.k.frags.items():
            kind = "float" if ft.role == "acc" else "unsigned"
            out.append(f"{kind} {self.frag(n)}[{self.frag_regs(ft)}];")
        return out

    def frag_op(self, s) -> list:
        if isinstance(s, ir.FragMma):
            ft = self.k.frags[s.a]
            fn = "kd_mma_bf16" if ft.dtype is bf16 else "kd_mma_f16"
            return [f"{fn}({self.frag(s.acc)}, {self.frag(s.a)}, {self.frag(s.b)});"]
        if isinstance(s, ir.FragFill):
            ft = self.k.frags[s.frag]
            v = self.x(s.value)
            n = self.frag_regs(ft)
            if ft.role == "acc":
                return [f"for (int kd_i = 0; kd_i < {n}; ++kd_i) {self.frag(s.frag)}[kd_i] = {v};"]
            if ft.group:
                return [f"{{ const unsigned kd_h = {self.float_to_half(v, ft.dtype)}; "
                        f"for (int kd_i = 0; kd_i < {n}; ++kd_i) {self.frag(s.frag)}[kd_i] = kd_h | (kd_h << 16); }}"]
            return [f"kd_frag_fill16({self.frag(s.frag)}, {self.float_to_half(v, ft.dtype)});"]
        if isinstance(s, ir.FragLoad):
            return self._frag_load(s)
        return self._frag_store(s)

    def e_frag_get(self, e):
        return f"{self.frag(e.frag)}[{e.elem}]"

    def s_frag_set(self, s):
        self.emit(f"{self.frag(s.frag)}[{s.elem}] = {self.x(s.value)};")

    def s_frag_convert(self, s):
        """Element i of an acc and of an a fragment sit at the same tile position (the
        m16n8k16 layouts), so the a registers are the acc values rounded, two per register."""
        ft = self.k.frags[s.dst]
        dt = ft.dtype
        src, dst = self.frag(s.src), self.frag(s.dst)
        kind = "bf16x2" if dt is bf16 else "f16x2"
        for r in range(self.frag_regs(ft)):  # one cvt rounds two elements into a register (high operand first)
            self.emit(f'asm("cvt.rn.{kind}.f32 %0, %1, %2;" : "=r"({dst}[{r}]) : "f"({src}[{2 * r + 1}]), '
                      f'"f"({src}[{2 * r}]));')

    def _frag_load(self, s: ir.FragLoad) -> list:
        ft = self.k.frags[s.frag]
        mem, dt = self._frag_mem(s.space, s.src)
        off, ld = self.x(s.offset), self.x(s.stride)
        f = self.frag(s.frag)
        if s.checked:
            return self._checked_frag_load(s, ft, mem, dt, off, ld, f)
        if ft.role == "acc":
            v = self.cast(self.from_mem(f"{mem}[{off} + kd_r * {ld} + kd_c]", dt), dt, f32)
            return ["for (int kd_i = 0; kd_i < 8; ++kd_i) {",
                    f"    int kd_r, kd_c; kd_frag_rc(2, kd_i, kd_lane, kd_r, kd_c); {f}[kd_i] = {v};", "}"]
        role = 0 if ft.role == "a" else 1
        col = ft.layout == "col"
        trans = (ft.role == "a") == col  # paired elements not adjacent in memory
        b = "true" if col else "false"
        gather = f"kd_frag_gather16({f}, {mem}, {off}, {ld}, {role}, {b}, kd_lane);"
        if s.space != "shared":
            return [gather]
        return [f"if ((({off}) & 7) == 0 && (({ld}) & 7) == 0)  // rows of 16 aligned bytes: ldmatrix",
                f"    kd_frag_ldsm({f}, {mem}, {off}, {ld}, {b}, {'true' if trans else 'false'}, kd_lane);",
                "else", f"    {gather}"]

    def _checked_frag_load(self, s, ft, mem, dt, off, ld, f) -> list:
        """Element by element, each offset bounds-checked (KERNELDSL_BOUNDS_CHECK)."""
        role = {"a": 0, "b": 1, "acc": 2}[ft.role]
        col = ft.layout == "col" and ft.role != "acc"
        at = f"{off} + kd_c * {ld} + kd_r" if col else f"{off} + kd_r * {ld} + kd_c"
        ok = self._frag_check(s.space, s.src, at, s.loc)
        if ft.role == "acc":
            v = self.cast(self.from_mem(f"{mem}[{at}]", dt), dt, f32)
            put = f"{f}[kd_i] = {ok} ? {v} : 0.0f;"
        else:
            put = (f"unsigned kd_h = {ok} ? (unsigned){mem}[{at}] : 0u; "
                   f"{f}[kd_i >> 1] = (kd_i & 1) ? ({f}[kd_i >> 1] | (kd_h << 16)) : kd_h;")
        return ["for (int kd_i = 0; kd_i < 8; ++kd_i) {",
                f"    int kd_r, kd_c; kd_frag_rc({role}, kd_i, kd_lane, kd_r, kd_c); {put}", "}"]

    def _frag_store(self, s: ir.FragStore) -> list:
        mem, dt = self._frag_mem(s.space, s.dst)
        off, ld = self.x(s.offset), self.x(s.stride)
        v = self.to_mem(self.cast(f"{self.frag(s.frag)}[kd_i]", f32, dt), dt)
        at = f"{off} + kd_r * {ld} + kd_c"
        guard = f"if ({self._frag_check(s.space, s.dst, at, s.loc)}) " if s.checked else ""
        loop = ["for (int kd_i = 0; kd_i < 8; ++kd_i) {",
                f"    int kd_r, kd_c; kd_frag_rc(2, kd_i, kd_lane, kd_r, kd_c); {guard}{mem}[{at}] = {v};",
                "}"]
        if s.checked or dt not in (f16, bf16, f32):
            return loop
        # elements 2i and 2i+1 of a lane are adjacent columns: one 4-byte (16-bit types) or
        # 8-byte (f32) store per pair where the address and the row stride allow
        f = self.frag(s.frag)
        if dt is f32:
            pair, width = f"make_float2({f}[kd_i], {f}[kd_i + 1])", 8
            ptr_t = "float2"
        else:
            lo = self.cast(f"{f}[kd_i]", f32, dt)
            hi = self.cast(f"{f}[kd_i + 1]", f32, dt)
            pair, width = f"((unsigned)({lo}) | ((unsigned)({hi}) << 16))", 4
            ptr_t = "unsigned"
        return [f"if ((((unsigned long long)({mem} + {off})) & {width - 1}) == 0 && (({ld}) & 1) == 0) {{",
                "    for (int kd_i = 0; kd_i < 8; kd_i += 2) {",
                "        int kd_r, kd_c; kd_frag_rc(2, kd_i, kd_lane, kd_r, kd_c);",
                f"        *({ptr_t}*)({mem} + {off} + kd_r * {ld} + kd_c) = {pair};",
                "    }", "} else {"] + ["    " + x for x in loop] + ["}"]

    # ------------------------------------------------------------------ group products
    def group_mma(self, s: ir.GroupMma) -> list:
        ft = self.k.frags[s.acc]
        dt = self.k.shared[s.b_tile.src].dtype
        if self.caps.group_mma_native:
            return self._wgmma(s, ft, dt)
        a = self.frag(s.a) if s.a_tile is None else "nullptr"
        at = "nullptr" if s.a_tile is None else self._tile_ptr(s.a_tile)
        ar, atr = (0, "false") if s.a_tile is None else (s.a_tile.stored_rows, self._bool(s.a_tile.transposed))
        b = s.b_tile
        zero = [] if s.accumulate else [f"for (int kd_i = 0; kd_i < {self.frag_regs(ft)}; ++kd_i) "
                                        f"{self.frag(s.acc)}[kd_i] = 0.0f;"]
        aw = tile_layout.band_width(s.a_tile.swizzle if s.a_tile is not None else b.swizzle)
        bw = tile_layout.band_width(b.swizzle)
        return zero + [f"kd_group_mma_sync<{ft.n}, {s.k}, {self._bool(dt is bf16)}, {aw}, {bw}>({self.frag(s.acc)}, "
                       f"{a}, {at}, "
                       f"{ar}, {atr}, {self._tile_ptr(b)}, {b.stored_rows}, {self._bool(b.transposed)}, kd_plane & 3, "
                       f"kd_lane);"]

    @staticmethod
    def _bool(v) -> str:
        return "true" if v else "false"

    def _tile_ptr(self, t: ir.SharedTile) -> str:
        return f"((const unsigned short*){self.shared(t.src)} + ({self.x(t.offset)}))"

    # wgmma descriptors' layout field a swizzle span (bytes) of kd.tile_offset's layouts
    WG_LAYOUT = {32: 3, 128: 1}

    @staticmethod
    def _wg_operand(t: ir.SharedTile, k_major: bool) -> tuple:
        """(lbo, sbo, function of the k16 step giving the descriptor's offset in 16-byte
        units, transpose flag) of a tile in kd.tile_offset's layout (atoms of 8 rows of one
        band, W = 16 or 64 columns, 2W bytes a row; tile_layout.py). K along its stored columns
        (k_major): the next 16 K are 32 bytes on in a band row, and a band R rows of 2W bytes
        on when the band is done; K along its stored rows: the next 16 K are 16 rows (32W
        bytes) on, and the N bands are R * 2W bytes apart."""
        R, w = t.stored_rows, tile_layout.band_width(t.swizzle)
        per_band = w // 16  # k16 steps a band holds (k-major)
        if k_major:
            return 16, 16 * w, lambda step: (step // per_band) * (R * w // 8) + (step % per_band) * 2, 0
        return 2 * w * R, 16 * w, lambda step: step * 2 * w, 1

    def _wgmma(self, s: ir.GroupMma, ft, dt) -> list:
        """One wgmma m64nNk16 per 16 of K, descriptors stepped along K, then a commit."""
        n, acc = ft.n, self.frag(s.acc)
        b = self._wg_operand(s.b_tile, s.b_tile.transposed)
        lines = ["{", f"    const unsigned long long kd_db = kd_wg_desc({self._tile_ptr(s.b_tile)}, {b[0]}, {b[1]}, "
                      f"{self.WG_LAYOUT[s.b_tile.swizzle]});"]
        if s.a_tile is not None:
            a = self._wg_operand(s.a_tile, not s.a_tile.transposed)
            lines.append(f"    const unsigned long long kd_da = kd_wg_desc({self._tile_ptr(s.a_tile)}, {a[0]}, {a[1]}, "
                         f"{self.WG_LAYOUT[s.a_tile.swizzle]});")
        lines.append('    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')
        ty = "bf16" if dt is bf16 else "f16"
        outs = ", ".join(f'"+f"({acc}[{i}])' for i in range(n // 2))
        dregs = ",".join(f"%{i}" for i in range(n // 2))
        for step in range(s.k // 16):
            o = n // 2
            if s.a_tile is None:
                a_ops = f"{{%{o},%{o + 1},%{o + 2},%{o + 3}}}"
                ins = [f'"r"({self.frag(s.a)}[{4 * step + r}])' for r in range(4)]
                o += 4
                flags = f"1, 1, {b[3]}"
            else:
                a_ops = f"%{o}"
                ins = [f'"l"(kd_da + {a[2](step)}ull)']
                o += 1
                flags = f"1, 1, {a[3]}, {b[3]}"
            ins.append(f'"l"(kd_db + {b[2](step)}ull)')
            scale_d = 1 if s.accumulate or step else 0  # 0: the first product overwrites acc
            lines.append(f'    asm volatile("{{ .reg .pred p; setp.ne.b32 p, {scale_d}, 0; '
                         f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{dregs}}}, {a_ops}, %{o}, p, {flags}; }}"')
            lines.append(f"                 : {outs}")
            lines.append(f"                 : {', '.join(ins)});")
        lines += ['    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");', "}"]
        return lines

    def group_wait(self, s: ir.GroupWait) -> list:
        if not self.caps.group_mma_native:
            return []  # mma.sync products are complete when issued
        lines = [f'asm volatile("wgmma.wait_group.sync.aligned {s.pending};" ::: "memory");']
        for name, ft in self.k.frags.items():
            # the products write the accumulators and read the a fragments after issue: tie
            # both to the wait so no read of an acc, and no write of an a fragment, moves above it
            if ft.group:
                c = '"+f"' if ft.role == "acc" else '"+r"'
                lines.append(f'for (int kd_i = 0; kd_i < {self.frag_regs(ft)}; ++kd_i) '
                             f'asm volatile("" : {c}({self.frag(name)}[kd_i]) :: "memory");')
        return lines

    # ------------------------------------------------------------------ result
    def render(self) -> CudaRendered:
        out = super().render()
        return CudaRendered(**vars(out), dynamic_shared=self.dynamic_shared_bytes(), filename=f"{self.k.name}.cu",
                            tensor_maps=self.tensor_map_boxes())


def render(k: ir.KernelIR, caps) -> CudaRendered:
    """Render one kernel for NVRTC."""
    return CudaRenderer(k, caps).render()


__all__ = ["CudaRenderer", "CudaRendered", "render"]
