"""DLPack for CUDA tensors: the device type, and the export of a kd CUDA tensor through the
shared capsule code of kerneldsl/dlpack_capsule.py (import reads capsules with it as is)."""
from __future__ import annotations

from kerneldsl.dlpack_capsule import DLManagedTensor, DLManagedTensorVersioned, DLTensor, export_view, read_capsule

KDL_CUDA = 2

__all__ = ["KDL_CUDA", "export_capsule", "read_capsule", "DLTensor", "DLManagedTensor", "DLManagedTensorVersioned"]


def export_capsule(tensor, device_id: int, versioned: bool):
    """A DLPack capsule viewing `tensor` (a kd tensor on a CUDA runtime); it holds the
    tensor's buffer until the consumer lets go."""
    data = tensor.buffer.raw + tensor.offset * tensor.dtype.itemsize if tensor.size else 0
    return export_view(data, (KDL_CUDA, device_id), tensor.dtype, tensor.shape, tensor.strides, tensor.buffer,
                       tensor.buffer.readonly, versioned)
