"""Bounds for rng.uniform.hlo: (a, b) per element type, in parameter order."""
import ml_dtypes
import numpy as np

BOUNDS = [(np.float32, 2, 3), (np.float64, -5, 7), (np.float16, 2, 3), (ml_dtypes.bfloat16, -1, 0),
          (np.int32, -3, 4), (np.uint32, 5, 10), (np.int64, -2**40, 2**40), (np.uint64, 0, 2**63 + 5)]


def inputs():
    return [np.array(v, t) for t, a, b in BOUNDS for v in (a, b)]
