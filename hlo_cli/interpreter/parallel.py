"""Work split across the machine's cores: fused regions, large elementwise steps and large dots.

XLA CPU runs large loops and dots on all cores; the interpreter does the same by cutting such a
step into independent parts (blocks of elements, rows of a product) and running them on a small
pool of threads.  NumPy releases the GIL inside its loops and BLAS calls, so the parts run at the
same time.  Results never depend on the number of threads: an elementwise step's element has the
same value whichever block it falls in, and a product is cut into pieces fixed by its shape alone
(the threads only share those pieces out).

``HLO_THREADS`` sets the number of threads (default: the cores this process may use; 1 turns the
pool off).  The pool's threads sleep between tasks.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .fpenv import flushing

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads: int | None = None


def threads() -> int:
    """How many threads a split uses (1: no split)."""
    global _threads
    if _threads is None:
        env = os.environ.get("HLO_THREADS", "").strip()
        n = 0
        if env:
            try:
                n = int(env)
            except ValueError:
                n = 0
        if n <= 0:
            try:
                n = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                n = os.cpu_count() or 1
        _threads = max(1, min(n, 64))
    return _threads


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=threads() - 1, thread_name_prefix="hlo")
    return _pool


def _quiet(fn, part):
    # floating-point error reporting is per thread: the pool's threads ignore it, like the caller
    _worker_blas()
    with np.errstate(all="ignore"):
        return fn(part)


def run_parts(fn, parts) -> list:
    """[fn(p) for p in parts]: the calling thread and the pool's threads take the parts one at a
    time from a shared counter (so more parts than threads keeps every thread busy); the first
    exception (in part order) is raised after every part has finished."""
    n = len(parts)
    if n < 2 or threads() < 2:
        return [fn(p) for p in parts]
    results: list = [None] * n
    errors: list = [None] * n
    lock = threading.Lock()
    nxt = [0]

    def loop(on_worker: bool):
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                return
            try:
                results[i] = _quiet(fn, parts[i]) if on_worker else fn(parts[i])
            except BaseException as e:      # noqa: BLE001 -- re-raised below, after the others end
                errors[i] = e

    pool = _executor()
    futures = [pool.submit(loop, True) for _ in range(min(threads() - 1, n - 1))]
    loop(False)
    for f in futures:
        f.result()
    for e in errors:
        if e is not None:
            raise e
    return results


def split(items: list, n: int) -> list[list]:
    """`items` cut into at most n contiguous parts of nearly equal length."""
    n = max(1, min(n, len(items)))
    q, r = divmod(len(items), n)
    out, lo = [], 0
    for i in range(n):
        hi = lo + q + (1 if i < r else 0)
        out.append(items[lo:hi])
        lo = hi
    return out


# ---------------------------------------------------------------------------- BLAS
# During a run, BLAS runs single-threaded in every thread (OpenBLAS's own threads would keep
# spinning after each product and compete with the pool), and large products are cut here instead.
#
# A product's rows are NOT computed the same way whichever rows surround them (OpenBLAS changes the last bits
# of some rows when they are computed in other pieces; hlo_cli/SEMANTICS.md).  So a large product is always
# cut into the same pieces, chosen from its shape alone (at most MAX_CHUNKS chunks of at least CHUNK_ROWS
# rows), and the threads share out whole pieces: the result depends on the shape, never on the number of
# threads.  A batch is cut between its matrices, which NumPy multiplies one by one anyway.

SPLIT_MIN_MACS = 1 << 26        # smaller products are one call
CHUNK_ROWS = 256                # every row chunk re-packs the right operand: keep chunks tall
MAX_CHUNKS = 8


# where NumPy's wheels keep their OpenBLAS (Linux, macOS, Windows, older wheels)
OPENBLAS_PATTERNS = ("../numpy.libs/*openblas*", ".dylibs/*openblas*", "../numpy.libs/*openblas*.dll",
                     ".libs/*openblas*")


def bundled_openblas() -> list[str]:
    """The paths of the OpenBLAS libraries bundled with NumPy (ops/custom_call.py's LAPACK too)."""
    base = os.path.dirname(np.__file__)
    out = []
    for pat in OPENBLAS_PATTERNS:
        out += sorted(glob.glob(os.path.join(base, pat)))
    return out


def _blas_local():
    """OpenBLAS's per-thread thread-count setter, or None."""
    global _setter
    if _setter is False:
        fn = None
        if os.environ.get("HLO_LAPACK", "").lower() != "numpy":     # (as ops/custom_call.lapack)
            for path in bundled_openblas():
                try:
                    fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
                except OSError:
                    continue
                if fn is not None:
                    fn.argtypes = [ctypes.c_int]
                    fn.restype = ctypes.c_int
                    break
        _setter = fn
    return _setter


_setter = False
_worker_ready = threading.local()


class blas_single:
    """Context: BLAS single-threaded on this thread (restored on exit)."""
    def __enter__(self):
        fn = _blas_local()
        self.prev = fn(1) if fn is not None else None
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            _blas_local()(self.prev)
        return False


def _worker_blas():
    if not getattr(_worker_ready, "done", False):
        fn = _blas_local()
        if fn is not None:
            fn(1)
        _worker_ready.done = True


def row_chunks(m: int) -> list[slice]:
    """The row ranges a large product of m rows is computed in (a function of m only)."""
    n = min(MAX_CHUNKS, m // CHUNK_ROWS)
    return _ranges(m, n) if n >= 2 else [slice(0, m)]


def matmul(x: np.ndarray, y: np.ndarray, ftz: bool = False) -> np.ndarray:
    """np.matmul of (b, m, k) and (b, k, n) arrays; a large one is computed in pieces fixed by its
    shape (see above), shared among the pool's threads.  `ftz`: with the processor's FTZ and DAZ
    flags set (hlo_cli/interpreter/fpenv.py; the caller checked they are available), as XLA CPU
    runs its products: subnormal operands, partial sums and results count as zeros."""
    b, m, k = x.shape
    n = y.shape[2]
    rows = row_chunks(m) if b * m * k * n >= SPLIT_MIN_MACS else None
    nt = threads()
    if rows is None or (len(rows) == 1 and (b < 2 or nt < 2)):
        return flushing(np.matmul, x, y) if ftz else np.matmul(x, y)
    if len(rows) == 1:
        pieces = [[(s, slice(None))] for s in _ranges(b, min(nt, b))]
    else:
        pieces = split([(slice(i, i + 1), r) for i in range(b) for r in rows], nt)
    out = np.empty((b, m, n), np.result_type(x.dtype, y.dtype))

    def part(items):
        for bs, rs in items:
            np.matmul(x[bs, rs], y[bs], out=out[bs, rs])
    with blas_single():
        run_parts((lambda items: flushing(part, items)) if ftz else part, pieces)
    return out


def _ranges(total: int, n: int) -> list[slice]:
    """range(total) cut like split(): n nearly equal slices."""
    return [slice(r.start, r.stop) for r in split(range(total), n)]
