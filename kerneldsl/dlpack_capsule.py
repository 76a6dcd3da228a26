"""DLPack capsules, both ways, with ctypes: no copy, any device and any kd dtype (bf16 too,
which numpy's own DLPack support refuses).

Export builds a `DLManagedTensor` (or the versioned struct when the consumer asks
with `max_version >= (1, 0)`) in a PyCapsule; the capsule keeps the kd tensor's
buffer alive until the consumer calls the deleter. Import reads a consumer-side
capsule (`dltensor` or `dltensor_versioned`), renames it `used_...` as the
protocol requires, and calls its deleter when the kd buffer is collected.
"""
from __future__ import annotations

import ctypes

from .dtypes import as_dtype, bf16, boolean, f16, f32, f64, i32, i64, u8, u32

from . import dlpack_release

KDL_CPU = 1
READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY of a versioned struct's flags
_CODES = {f32: (2, 32), f16: (2, 16), bf16: (4, 16), f64: (2, 64), i32: (0, 32), u32: (1, 32), i64: (0, 64),
          u8: (1, 8), boolean: (6, 8)}
_BY_CODE = {v: k for k, v in _CODES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_PF = ctypes.PYFUNCTYPE  # private prototypes: ctypes.pythonapi's shared attributes stay untouched
_capsule_new = _PF(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_New", _api))
_capsule_is_valid = _PF(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_get_pointer = _PF(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_capsule_set_name = _PF(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))

# ---------------------------------------------------------------------------- export
# capsules keep the char* of their name: these module constants outlive every capsule
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}
_USED = {False: b"used_dltensor", True: b"used_dltensor_versioned"}
_py_incref = _PF(None, ctypes.py_object)(("Py_IncRef", _api))


def export_view(data: int, device: tuple, dtype, shape, strides, keep, readonly: bool, versioned: bool):
    """A DLPack capsule viewing memory at address `data` on `device` (DLPack (type, id)) as
    `dtype` with `shape` and `strides` in elements; `keep` (the buffer or array owning the
    memory) stays alive until the consumer lets go."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    code, bits = _CODES[as_dtype(dtype)]
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    dl = managed.dl_tensor
    dl.data = data
    dl.device = DLDevice(*device)
    dl.ndim = ndim
    dl.dtype = DLDataType(code, bits, 1)
    dl.shape = shape_arr
    dl.strides = strides_arr
    dl.byte_offset = 0  # a view's offset is in `data`, as PyTorch exports it
    # the keeper holds the struct, its arrays and the memory's owner; the export owns one
    # reference to it, which the native deleter (dlpack_release.py) drops, with or without the GIL
    keeper = (managed, shape_arr, strides_arr, keep)
    _py_incref(keeper)
    native = dlpack_release.functions()
    managed.manager_ctx = id(keeper)
    managed.deleter = _DELETER(native[("deleter", versioned)])
    if versioned:
        managed.version = DLPackVersion(1, 0)
        managed.flags = READ_ONLY if readonly else 0
    return _capsule_new(ctypes.addressof(managed), _NAMES[versioned], native[("destructor", versioned)])


# ---------------------------------------------------------------------------- import
class ImportedCapsule:
    """Owns a consumed DLPack struct; calls the producer's deleter when collected."""

    def __init__(self, addr: int, versioned: bool, source):
        self.addr = addr
        self.versioned = versioned
        self.source = source  # the producer's object, kept alive as well
        kind = DLManagedTensorVersioned if versioned else DLManagedTensor
        self.managed = kind.from_address(addr)
        self.readonly = bool(versioned and self.managed.flags & READ_ONLY)  # the producer forbids writes

    def __del__(self):
        try:
            deleter = self.managed.deleter
            if deleter:
                deleter(self.addr)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


def read_capsule(capsule, source):
    """(owner, data address, device (type, id), dtype, shape, strides in elements) of a capsule."""
    for versioned in (True, False):
        name = _NAMES[versioned]
        if _capsule_is_valid(capsule, name):
            addr = _capsule_get_pointer(capsule, name)
            _capsule_set_name(capsule, _USED[versioned])
            owner = ImportedCapsule(addr, versioned, source)
            break
    else:
        raise BufferError("from_dlpack: the object's __dlpack__ did not return an unused DLPack capsule")
    dl = owner.managed.dl_tensor
    key = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or key not in _BY_CODE:
        raise TypeError(f"from_dlpack: unsupported DLPack dtype (code {dl.dtype.code}, bits {dl.dtype.bits}, "
                        f"lanes {dl.dtype.lanes}); kd supports f32 f16 bf16 f64 i32 u32 i64 u8 bool")
    dtype = _BY_CODE[key]
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if dl.strides:
        strides = tuple(dl.strides[i] for i in range(dl.ndim))
    else:
        from .tensor import contiguous_strides
        strides = contiguous_strides(shape)
    if any(s < 0 for s in strides):
        raise ValueError(f"from_dlpack: negative strides {strides} are not supported; pass a .contiguous() copy")
    data = (dl.data or 0) + dl.byte_offset
    return owner, data, (dl.device.device_type, dl.device.device_id), as_dtype(dtype), shape, strides
