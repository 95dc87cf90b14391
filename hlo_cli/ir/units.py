"""Byte counts as text (the memory estimate's, `hlo info`'s and the run's messages).  Imports nothing, so
that printing a cached summary loads neither NumPy nor the interpreter."""
from __future__ import annotations


def human(n: int) -> str:
    """8000000000000 -> '8,000,000,000,000 bytes (7.28 TiB)'."""
    size, unit = float(n), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024:
            break
        size, unit = size / 1024, u
    return f"{n:,} bytes" + (f" ({size:.2f} {unit})" if unit != "bytes" else "")
