"""Native release functions for exported DLPack tensors, JIT-compiled once with llvmlite.

A consumer calls an export's deleter when it lets go, and Python frees an unconsumed
capsule through its destructor; either may happen while an exception is propagating (a
consumer that rejects the capsule, a torch tensor freed during unwinding) or on a thread
without the GIL. A Python callback cannot run then (CPython turns its result into a
SystemError), so both are small native functions: they take the GIL and drop the one
reference the export holds on its keeper object (a tuple of the struct, the shape and
strides arrays and the tensor's buffer). Freeing that object runs no Python code that
could see the pending exception: a `__del__` is run by CPython with the exception set
aside.
"""
from __future__ import annotations

import ctypes
import functools

# byte offsets of `manager_ctx` in DLManagedTensor (after the 48-byte DLTensor) and in
# DLManagedTensorVersioned (after the 8-byte version)
_CTX_OFFSET = {False: 48, True: 8}
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}

_PYTHON_API = ("PyGILState_Ensure", "PyGILState_Release", "Py_DecRef", "PyCapsule_IsValid",
               "PyCapsule_GetPointer")


def _c_string(name: str, text: bytes) -> str:
    body = "".join(f"\\{b:02X}" for b in text + b"\0")
    return f'@{name} = private constant [{len(text) + 1} x i8] c"{body}"'


def _module_text() -> str:
    lines = ["declare i32 @PyGILState_Ensure()", "declare void @PyGILState_Release(i32)",
             "declare void @Py_DecRef(ptr)", "declare i32 @PyCapsule_IsValid(ptr, ptr)",
             "declare ptr @PyCapsule_GetPointer(ptr, ptr)"]
    for versioned, suffix in ((False, ""), (True, "_versioned")):
        lines += [_c_string(f"name{suffix}", _NAMES[versioned]),
                  f"define void @kd_dlpack_deleter{suffix}(ptr %m) {{",
                  f"  %slot = getelementptr i8, ptr %m, i64 {_CTX_OFFSET[versioned]}",
                  "  %keeper = load ptr, ptr %slot",
                  "  %gil = call i32 @PyGILState_Ensure()",
                  "  call void @Py_DecRef(ptr %keeper)",
                  "  call void @PyGILState_Release(i32 %gil)",
                  "  ret void", "}",
                  # an unconsumed capsule still has its first name: release its struct too
                  f"define void @kd_capsule_destructor{suffix}(ptr %capsule) {{",
                  f"  %valid = call i32 @PyCapsule_IsValid(ptr %capsule, ptr @name{suffix})",
                  "  %unused = icmp ne i32 %valid, 0",
                  "  br i1 %unused, label %release, label %done",
                  "release:",
                  f"  %m = call ptr @PyCapsule_GetPointer(ptr %capsule, ptr @name{suffix})",
                  f"  call void @kd_dlpack_deleter{suffix}(ptr %m)",
                  "  br label %done",
                  "done:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def functions() -> dict:
    """{(kind, versioned): address} for kind 'deleter' and 'destructor'; compiled on first use."""
    import llvmlite.binding as llvm
    try:
        llvm.initialize()
    except RuntimeError:  # newer llvmlite initialises itself
        pass
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for name in _PYTHON_API:
        llvm.add_symbol(name, ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value)
    module = llvm.parse_assembly(_module_text())
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    functions.engine = engine  # the code lives as long as the engine: for the process
    return {(kind, v): engine.get_function_address(f"kd_{name}{'_versioned' if v else ''}")
            for v in (False, True) for kind, name in (("deleter", "dlpack_deleter"),
                                                       ("destructor", "capsule_destructor"))}
