"""What the per-op benchmarks share: the best wall time of several runs."""
from __future__ import annotations

import time


def best_of(fn, repeat: int):
    """(the shortest wall time of `repeat` calls of fn(), the last call's result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out
