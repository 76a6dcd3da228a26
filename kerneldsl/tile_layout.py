"""The group-tile layouts: how a matrix of 16-bit elements is stored in shared memory for
kd.group_mma, kd.bulk_copy and kd.bulk_store (wgmma's swizzled core-matrix layouts, the bulk
copy engine's swizzle modes), in one place for the front end and every back end.

A layout is named by its swizzle span in bytes, 32 or 128. Columns are stored in bands of
`band_width(swizzle)` elements (16 or 64: one span of 16-bit elements), band after band; in a
band, row after row. Inside a row the 16-byte chunks (8 elements) are permuted: chunk j of
row r is stored at j ^ (r // rows_per_flip % chunks), i.e. the bits of the byte address
4.. are xor-ed with its bits 7.. (the hardware's Swizzle<b, 4, 3>). 32-byte rows make 32-byte
copies and reads; 128-byte rows let the copy engine move 128 contiguous bytes a request.
"""
from __future__ import annotations

SWIZZLES = (32, 128)  # swizzle spans (bytes) the layouts use
DEFAULT_SWIZZLE = 32


def band_width(swizzle: int) -> int:
    """Columns (16-bit elements) of one band: one swizzle span."""
    return swizzle // 2


def chunks(swizzle: int) -> int:
    """16-byte chunks a band row holds (the xor's range)."""
    return band_width(swizzle) // 8


def rows_per_flip(swizzle: int) -> int:
    """Rows that share one xor pattern: the pattern follows the byte address's bit 7 and up."""
    return 64 // band_width(swizzle)


def alignment(swizzle: int) -> int:
    """Elements a tile's start must be a multiple of: 8 rows of a band (the pattern's period)."""
    return 8 * band_width(swizzle)


def offset(r: int, c: int, rows: int, swizzle: int = DEFAULT_SWIZZLE) -> int:
    """Element offset of (r, c) in a matrix of `rows` rows stored in this layout (Python ints:
    the interpreter, tests and host code)."""
    w, n = band_width(swizzle), chunks(swizzle)
    inner = (((c % w) // 8) ^ ((r // rows_per_flip(swizzle)) % n)) * 8 + c % 8
    return (c // w) * (rows * w) + r * w + inner


def c_offset(r: str, c: str, rows: int, swizzle: int) -> str:
    """offset() as a C expression of non-negative int expressions r and c."""
    w, n = band_width(swizzle), chunks(swizzle)
    return (f"(({c}) / {w}) * {rows * w} + ({r}) * {w} + (((({c}) % {w}) / 8) ^ ((({r}) / {rows_per_flip(swizzle)}) "
            f"% {n})) * 8 + ({c}) % 8")


def check(swizzle, what: str = "swizzle") -> int:
    """`swizzle` if it names a layout, else ValueError naming the choices."""
    if isinstance(swizzle, bool) or swizzle not in SWIZZLES:
        raise ValueError(f"{what} must be one of {SWIZZLES} (bytes), got {swizzle!r}")
    return swizzle
