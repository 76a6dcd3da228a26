"""Strategy choice for rudnn.convolution: what `ImplicitGemm` covers (else `Direct` runs),
and `Autotune`, which times the valid candidates once per (device, pass, dtype, layout of the
geometry, shape buckets) key through the shared `kerneldsl.autotune` tuner (persisted
beside the kernel cache). ImplicitGemm joins the candidates only where the matrix primitive
is native (`"mma" in caps.matrix_kinds`): elsewhere it is an exact emulation, kept for
correctness, never faster than Direct."""
from __future__ import annotations

from kerneldsl import autotune

from . import depthwise, implicit_gemm
from .options import ConvStrategy

FAMILY = "convolution"


def key(p, pass_name: str) -> tuple:
    g = p.geo
    return (autotune.device_key(p.runtime), pass_name, p.dtype.name, g.rank, g.R, g.stride, g.dil,
            g.groups == g.C and g.groups == g.K, autotune.bucket(g.B * g.pixels), autotune.bucket(g.Cg),
            autotune.bucket(g.Kg), p.x is not None and p.x.strides[1] == 1)


def label(p, pass_name: str) -> str:
    g = p.geo
    return (f"{pass_name}, {p.dtype.name}, {g.rank}-D, kernel {list(g.R[3 - g.rank:])}, "
            f"B*O~{autotune.bucket(g.B * g.pixels)}, Cg~{autotune.bucket(g.Cg)}, Kg~{autotune.bucket(g.Kg)}")


def tunes(p) -> bool:
    """Autotune times the candidates only where the matrix primitive is native."""
    return "mma" in p.runtime.capabilities.matrix_kinds


def direct_plan(p, pass_name: str) -> str:
    """Which kernels `Direct` runs for a 'forward', 'data' or 'weight' (backward) pass: 'rows'
    (rows.py: a cube is one vector along an output row, over a zero-padded copy) where a
    cube's units are SIMD lanes, else 'units' (direct.py: a unit per output position, reads
    bounds-tested). All passes choose alike: the data backward's rows plan spreads the
    gradient out by the stride (stride-product times the products), yet at a spread of 25
    (5x5, stride 5) it still measured 17x faster than the units plan on the 2-core dev box;
    the weight gradient's rows plan measured 100x faster (3x3, 64 channels at 56²).
    Elsewhere a depthwise pass that depthwise.py covers takes 'depthwise' (a unit or cube per
    channel, not direct.py's block of output channels of one group)."""
    if p.runtime.capabilities.units_are_simd_lanes:
        return "rows"
    return "depthwise" if depthwise.covers(p, pass_name) else "units"


def resolve(p, pass_name: str, strategy: ConvStrategy, runners: dict) -> str:
    """The runner name ('Direct' or 'ImplicitGemm') for `strategy`: ImplicitGemm where it
    covers p, else Direct; Autotune times both where the primitive is native."""
    gemm_ok = not implicit_gemm.covers(p, pass_name)
    if strategy is ConvStrategy.Direct:
        return "Direct"
    if strategy is ConvStrategy.ImplicitGemm:
        return "ImplicitGemm" if gemm_ok else "Direct"
    if not (gemm_ok and tunes(p)):
        return "Direct"
    return autotune.tuner(FAMILY).choose(
        key(p, pass_name), {n: autotune.waited(p.runtime, r) for n, r in runners.items()}, label(p, pass_name))
