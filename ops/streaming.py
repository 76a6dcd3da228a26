"""When operators ask their kernels for `kd.streaming_stores()`: kernels that write an output
of STREAM_BYTES or more and do not read it back, on runtimes whose Capabilities say the hint
makes stores bypass the caches (the cpu runtime on x86: non-temporal stores). Below that size
the output may still be in a cache when the next operator reads it; past it, a cached store
first reads the line it writes and the output pushes out what the caches held."""
from __future__ import annotations

# 2-core Emerald Rapids (300 MiB L3 shared with its host, 4 MiB L2 a core), ms a call, plain →
# streaming: ×2 nearest interpolation of [32, 64, 256²] f32 (2 GiB out) 160 → 54, its backward
# (512 MiB dx) 147 → 110, global average pooling's backward of [64, 256, 56²] (196 MiB) 10.8 → 4.5,
# layer_norm / rms_norm of [16384, 4096] f32 (256 MiB) 27.3 → 18.8 / 26.4 → 17.2
STREAM_BYTES = 64 << 20
# A streamed store that fills part of a line, the rest written by a cached store, costs more than
# it saves: bf16 average pooling backward of [64, 64, 112²] (rows of 224 bytes, each row's tail
# a masked cached store) 31-38 -> 39-42 ms streamed, f32 (rows of 448 bytes) 26-30 -> 20-22 ms.
LINE_BYTES = 64


def streams(caps, nbytes: int, run_bytes: int | None = None) -> bool:
    """Whether a kernel writing `nbytes` it does not read back should call kd.streaming_stores();
    `run_bytes`: the length of the contiguous runs it writes, each ending in a masked store,
    where that is not the whole output (then only runs of whole lines stream)."""
    return caps.streaming_stores and nbytes >= STREAM_BYTES and (run_bytes is None or run_bytes % LINE_BYTES == 0)
