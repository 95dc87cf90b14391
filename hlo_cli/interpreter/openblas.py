"""NumPy's bundled OpenBLAS, called through ctypes: the LAPACK the custom-call rules run
(ops/custom_call.py; the same library jaxlib gets through SciPy) and the BLAS whose per-thread
thread count parallel.py sets."""
from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache

import numpy as np


class Lapack:
    """LAPACK/BLAS routines of NumPy's bundled OpenBLAS, called through ctypes (Fortran ABI:
    every argument by reference, hidden character lengths appended)."""

    def __init__(self, lib, prefix: str, suffix: str, int_dtype):
        self.lib = lib
        self.prefix = prefix
        self.suffix = suffix
        self.int = np.dtype(int_dtype)

    def fn(self, name: str):
        return getattr(self.lib, f"{self.prefix}{name}{self.suffix}")

    def call(self, name: str, *args):
        """Call routine `name`; args are ndarrays (passed by address; ints and chars must already
        be 1-element arrays) and str (a character argument)."""
        cargs, nchars, keep = [], 0, []
        for a in args:
            if isinstance(a, str):
                buf = np.frombuffer(a.encode()[:1], dtype=np.uint8).copy()
                keep.append(buf)
                cargs.append(ctypes.c_void_p(buf.ctypes.data))
                nchars += 1
            elif a is None:
                cargs.append(ctypes.c_void_p(0))
            else:
                cargs.append(ctypes.c_void_p(a.ctypes.data))
        cargs += [ctypes.c_size_t(1)] * nchars
        f = self.fn(name)
        f.restype = None
        f(*cargs)

    def i(self, v=0):
        return np.array([v], dtype=self.int)


@lru_cache(maxsize=1)
def lapack() -> Lapack | None:
    """NumPy's bundled OpenBLAS (the same LAPACK jaxlib gets through SciPy), or None."""
    if os.environ.get("HLO_LAPACK", "").lower() == "numpy":
        return None
    base = os.path.dirname(np.__file__)
    cands = []
    for pat in ("../numpy.libs/*openblas*", ".dylibs/*openblas*", "../numpy.libs/*openblas*.dll",
                ".libs/*openblas*"):
        cands += sorted(glob.glob(os.path.join(base, pat)))
    for path in cands:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, it in (("scipy_", "_64_", np.int64), ("scipy_", "_", np.int32),
                                   ("", "_64_", np.int64), ("", "_", np.int32)):
            try:
                getattr(lib, f"{prefix}dpotrf{suffix}")
                getattr(lib, f"{prefix}dgesdd{suffix}")
            except AttributeError:
                continue
            return Lapack(lib, prefix, suffix, it)
    return None
