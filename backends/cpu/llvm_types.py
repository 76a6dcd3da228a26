"""LLVM types and constants of the CPU renderer: registers vs memory for each DType."""
from __future__ import annotations

import numpy as np
from llvmlite import ir as L

from kerneldsl.dtypes import VecType, bf16, boolean, f16, f32, f64, i32, i64, u8, u32

I1, I8, I16, I32, I64 = L.IntType(1), L.IntType(8), L.IntType(16), L.IntType(32), L.IntType(64)
F16, F32, F64 = L.HalfType(), L.FloatType(), L.DoubleType()
VOID = L.VoidType()
I8P = I8.as_pointer()

_REG = {f32: F32, f64: F64, f16: F16, bf16: I16, i32: I32, u32: I32, i64: I64, u8: I8, boolean: I1}


def reg_type(t):
    """LLVM type of a value in registers (bool: i1)."""
    if isinstance(t, VecType):
        return L.ArrayType(_REG[t.elem], t.lanes)
    return _REG[t]


def mem_type(t):
    """LLVM type of an element in memory (bool: one byte)."""
    if isinstance(t, VecType):
        return L.ArrayType(mem_type(t.elem), t.lanes)
    return I8 if t is boolean else _REG[t]


def constant(t, value):
    """An LLVM constant of DType t in registers (bf16 as its 16 bits, bool as i1)."""
    if t is bf16:
        bits = int(np.asarray(value, np.float32).astype(bf16.np).view(np.uint16))
        return L.Constant(I16, bits)
    if t is boolean:
        return L.Constant(I1, int(bool(value)))
    return L.Constant(_REG[t], value)
