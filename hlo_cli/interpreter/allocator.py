"""Keeping freed array memory for reuse (glibc only).

A run allocates and frees arrays of a few megabytes all the time.  glibc's malloc serves such sizes
with fresh mmap'd pages and returns them to the system on free, so every new array pays a page
fault per 4 KiB on first touch, which makes a fresh array several times dearer to fill than a
reused one.  With the mmap threshold raised to its maximum (32 MB) and
the trim threshold to 256 MB, freed blocks stay in the heap and are reused: a transformer_512
training step (benchmarks/) goes from 123,000 page faults per run to 91,000.  A 1 GB trim
threshold brought that to 7,000, but would keep up to 1 GB of freed memory in a process that uses
the Python API; 256 MB is the compromise.

The setting is process-wide and applied once, on the first run; ``HLO_MALLOC=system`` leaves
malloc alone.  Other C libraries are left alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20       # glibc's largest accepted value on 64-bit systems
TRIM_THRESHOLD = 256 << 20

_done = False                   # decided (the answer is in _ok)
_ok = False


def keep_freed_memory() -> bool:
    """Apply the setting (the first call decides); True if glibc accepted it."""
    global _done, _ok
    if not _done:
        _done = True
        _ok = _apply()
    return _ok


def _apply() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("HLO_MALLOC", "").lower() == "system":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):         # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
