"""XLA CPU's flush-to-zero done by the processor, for the hottest float operations.

XLA CPU runs its kernels with the x86 MXCSR flags FTZ (subnormal results become zeros of the same
sign) and DAZ (subnormal operands are read as zeros of the same sign) set.  The evaluation rules
emulate that with extra passes over every operand and result (hlo_cli/interpreter/ops/convert.py:
flush); the fast path of f32/f64 add, subtract, multiply and divide, f32/f64 add-reductions and
large f32 products instead set the two flags around the NumPy call (``flushing``), exactly as XLA
does, and need no extra pass.

The flags are set through glibc's fegetenv/fesetenv (x86-64 only: the MXCSR word sits at byte 28 of
glibc's fenv_t).  On first use a probe checks that setting them flushes a subnormal product and
sum and that clearing them brings subnormals back; anywhere else (other processors, other C
libraries, a process already running with FTZ, DAZ or a non-default rounding mode) ``hardware()``
is None and the software emulation is used.  ``HLO_FTZ=software`` forces the emulation.

MXCSR belongs to a thread: whoever sets the flags must clear them on the same thread, and a
product split across the thread pool sets the flags in each part.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys

import numpy as np

_FTZ, _DAZ = 0x8000, 0x0040
_ROUNDING = 0x6000              # the rounding-control bits: 0 = round to nearest even
_MXCSR_AT = 28                  # offset of __mxcsr in glibc's x86-64 fenv_t (32 bytes)

_state: tuple | None | bool = False
_buffers = None


def hardware():
    """(setenv, ON, OFF): ``setenv(ON)`` sets FTZ+DAZ on the calling thread and ``setenv(OFF)``
    clears them (one C call each); None when the processor's flags cannot be used (see the module
    docstring)."""
    global _state
    if _state is False:
        _state = _probe()
    return _state


def flushing(fn, *args, **kwargs):
    """fn(*args, **kwargs) with FTZ+DAZ set on this thread, cleared again afterwards (also when it
    raises).  Only when hardware() is not None."""
    return _with_flags(hardware(), fn, *args, **kwargs)


def _with_flags(hw, fn, *args, **kwargs):
    fset, on, off = hw
    fset(on)
    try:
        return fn(*args, **kwargs)
    finally:
        fset(off)


def _probe():
    global _buffers
    if os.environ.get("HLO_FTZ", "").lower() == "software":
        return None
    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        getenv, setenv = libm.fegetenv, libm.fesetenv
    except (OSError, AttributeError):
        return None
    off_buf = ctypes.create_string_buffer(64)
    if getenv(off_buf) != 0:
        return None
    mxcsr = int.from_bytes(off_buf.raw[_MXCSR_AT:_MXCSR_AT + 4], "little")
    if mxcsr & (_FTZ | _DAZ | _ROUNDING):
        return None                             # someone else's settings: leave them alone
    on_buf = ctypes.create_string_buffer(off_buf.raw, 64)
    on_buf[_MXCSR_AT:_MXCSR_AT + 4] = (mxcsr | _FTZ | _DAZ).to_bytes(4, "little")
    _buffers = (on_buf, off_buf)                # kept alive as long as the references
    hw = (setenv, ctypes.byref(on_buf), ctypes.byref(off_buf))

    sub32 = np.array([1e-39, -1e-39], np.float32)
    one32 = np.ones(2, np.float32)
    sub64 = np.array([1e-310, -1e-310], np.float64)
    with np.errstate(all="ignore"):
        plain = (sub32 * one32, sub64 + 0.0)
        flushed = _with_flags(hw, lambda: (sub32 * one32, sub32 + np.float32(0),
                                           np.float32(1e-30) * np.float32(1e-10) * one32,
                                           sub64 * 1.0, sub64 / 1.0))
        back = (sub32 * one32, sub64 + 0.0)
    signs = [False, True]
    ok = (all((f == 0).all() and np.signbit(f).tolist() == signs for f in (flushed[0], flushed[3], flushed[4]))
          and all((f == 0).all() for f in flushed)      # (-0 + 0 is +0)
          and all(np.array_equal(p, b) and (b != 0).all() for p, b in zip(plain, back)))
    return hw if ok else None
