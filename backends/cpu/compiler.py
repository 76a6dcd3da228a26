"""LLVM IR text -> native object code for this CPU, through llvmlite (text in, bytes out)."""
from __future__ import annotations

import functools
import os

import llvmlite
import llvmlite.binding as llvm

from kerneldsl import envflags

from . import masked_stores, streaming


@functools.lru_cache(maxsize=None)
def target_machine(gathers: bool = True):
    """The host's target machine for compilation (shared; never handed to an engine); with
    `gathers` off, one that prefers vector loads and shuffles to gather instructions
    (kd.avoid_gathers(): `without_gathers`)."""
    return new_target_machine(features() if gathers else without_gathers(features()))


def new_target_machine(feature_string: str | None = None):
    """A fresh target machine (for the host's `features()` unless given others): an MCJIT
    engine takes ownership of the one it is given."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=features() if feature_string is None else feature_string,
        opt=3, reloc="pic", codemodel="jitdefault")


NO_GATHER_LLVM = 17  # the first LLVM with the "prefer-no-gather" feature (older ones warn and ignore it)


def without_gathers(host: str) -> str:
    """`host` (a feature string) telling LLVM to prefer no gathers, where the host is x86 with
    gather instructions (AVX2 or AVX-512) and LLVM knows the feature: strided loads become
    vector loads and shuffles, and other gathered loads one scalar load a lane. Elsewhere
    `host` unchanged."""
    flags = host.split(",")
    if llvm.llvm_version_info[0] >= NO_GATHER_LLVM and ("+avx2" in flags or "+avx512f" in flags):
        return host + ",+prefer-no-gather"
    return host


@functools.lru_cache(maxsize=None)
def features() -> str:
    """The host's CPU features as LLVM spells them (read once a process). On AVX-512 hosts,
    unless $KERNELDSL_CPU_WIDE_VECTORS is off, with LLVM's preference for 256-bit vectors
    lifted ("-prefer-256-bit"), so unit loops use 512-bit registers."""
    return with_wide_vectors(llvm.get_host_cpu_features().flatten(), wide_vectors())


def wide_vectors() -> bool:
    """$KERNELDSL_CPU_WIDE_VECTORS is not off (the default: on)."""
    return os.environ.get("KERNELDSL_CPU_WIDE_VECTORS", "1").strip().lower() not in envflags.OFF


def with_wide_vectors(host: str, wide: bool) -> str:
    """`host` (a feature string) with the 256-bit preference lifted where it has AVX-512 and
    `wide`. LLVM tunes Intel server cores (Skylake-SP to Emerald Rapids) to prefer 256-bit
    vectors, for Skylake's AVX-512 clock drop; on a 2-core Emerald Rapids box 512-bit unit
    loops ran 1.2-2x faster (exp/log-heavy CTC, attention, norms, interpolation:
    benchmarks/RESULTS.md, session 47). On a CPU whose LLVM tuning does not prefer 256 bits
    the flag changes nothing."""
    if wide and "+avx512f" in host.split(","):
        return host + ",-prefer-256-bit"
    return host


@functools.lru_cache(maxsize=None)
def arch() -> str:
    """CPU name, features and toolchain: part of the kernel cache key."""
    return f"{llvm.get_process_triple()}|{llvm.get_host_cpu_name()}|{features()}" \
           f"|llvmlite-{llvmlite.__version__}|llvm-{'.'.join(map(str, llvm.llvm_version_info))}"


def optimize(source: str, slp: bool = True, gathers: bool = True):
    tm = target_machine(gathers)
    mod = llvm.parse_assembly(source)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = slp  # (off for kernels that ask kd.scalar_statements())
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_source(source: str, slp: bool = True, stream: bool = False, gathers: bool = True) -> bytes:
    """Optimise (O3, the loop vectoriser on, the SLP vectoriser where `slp`, gather
    instructions only where `gathers`), make one-lane masked stores scalar (masked_stores.py:
    an x86 miscompile), make wide stores non-temporal where `stream` (kd.streaming_stores():
    streaming.py) and emit an object file."""
    return target_machine(gathers).emit_object(_finished(source, slp, stream, gathers))


def assembly(source: str, slp: bool = True, stream: bool = False, gathers: bool = True) -> str:
    """The module compile_source would emit, as assembly, for reading (e.g. to check vectorisation)."""
    return target_machine(gathers).emit_assembly(_finished(source, slp, stream, gathers))


def _finished(source: str, slp: bool, stream: bool, gathers: bool):
    mod = masked_stores.one_lane_stores_fixed(optimize(source, slp, gathers))
    return streaming.streaming(mod, target_machine(gathers)) if stream else mod
