"""DLPack on the cpu runtime for every kd dtype, bf16 included, both ways with PyTorch:
zero-copy (writes show through), strided views keep their strides, the export holds its
memory after the tensor is gone, an import holds its producer, read-only stays read-only."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kerneldsl as kd

torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")

# kd dtype -> torch dtype (u32: torch's uint32 has no arithmetic on the CPU, but DLPack carries it)
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
          "i32": torch.int32, "u32": torch.uint32, "i64": torch.int64, "u8": torch.uint8, "bool": torch.bool}


def _values(dtype: str, shape=(3, 4)) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) % 7 + 1).reshape(shape).astype(kd.dtypes.as_dtype(dtype).np)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_export_to_torch_shares_memory(dtype):
    rt = kd.runtime("cpu")
    t = rt.tensor(_values(dtype))
    view = t[1:, ::2]
    y = torch.from_dlpack(view)
    assert y.dtype == DTYPES[dtype] and tuple(y.shape) == view.shape and y.stride() == view.strides
    assert np.array_equal(y.view(torch.int16).numpy().view(view.dtype.np) if dtype == "bf16" else y.numpy(),
                          view.numpy())
    del t, view
    gc.collect()
    junk = [rt.tensor(np.zeros((3, 4), kd.dtypes.as_dtype(dtype).np)) for _ in range(4)]  # reuse a freed buffer
    want = _values(dtype)[1:, ::2]
    got = y.view(torch.int16).numpy().view(want.dtype) if dtype == "bf16" else y.numpy()
    assert np.array_equal(got, want), "the export must hold its buffer after the tensor is gone"
    del junk


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_import_from_torch_shares_memory(dtype):
    x = torch.from_numpy(_values(dtype).view(np.int16) if dtype == "bf16" else _values(dtype))
    if dtype == "bf16":
        x = x.view(torch.bfloat16)
    t = kd.from_dlpack(x[:, 1:])
    assert t.dtype is kd.dtypes.as_dtype(dtype) and t.shape == (3, 3) and t.strides == (4, 1)
    x[2, 3] = 0 if dtype != "bool" else True
    assert t.numpy()[2, 2] == (True if dtype == "bool" else 0), "the import must share the producer's memory"
    del x
    gc.collect()
    assert t.numpy()[2, 2] == (True if dtype == "bool" else 0), "the import must hold its producer"


def test_bf16_round_trip_and_kernel_write():
    """A bf16 torch tensor goes in, an operator writes a kd tensor, it comes back as bf16."""
    import rudnn.normalization as N
    x = torch.randn(4, 16).to(torch.bfloat16)
    g = torch.ones(16)
    y = torch.from_dlpack(N.rms_norm(kd.from_dlpack(x), kd.from_dlpack(g)))
    assert y.dtype == torch.bfloat16
    want = torch.nn.functional.rms_norm(x.float(), (16,), g, eps=1e-6)
    torch.testing.assert_close(y.float(), want, atol=2e-2, rtol=2e-2)


def test_bf16_versioned_export_is_read_only_when_the_tensor_is():
    a = np.array([1.5, -2.0], dtype=kd.bf16.np)
    a.flags.writeable = False
    t = kd.from_dlpack(a)          # a read-only numpy bf16 array: a read-only tensor
    y = torch.from_dlpack(t)       # torch asks for a versioned capsule and sees the flag
    assert y.dtype == torch.bfloat16 and y.float().tolist() == [1.5, -2.0]
    with pytest.raises(BufferError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="copy"):
        t.__dlpack__(dl_device=(2, 0))
    copied = torch.from_dlpack(t.__dlpack__(copy=True, max_version=(1, 0)))
    assert copied.float().tolist() == [1.5, -2.0]


def test_empty_bf16_both_ways():
    t = kd.runtime("cpu").empty((0, 3), kd.bf16)
    assert tuple(torch.from_dlpack(t).shape) == (0, 3)
    assert kd.from_dlpack(torch.empty(2, 0, dtype=torch.bfloat16)).shape == (2, 0)
