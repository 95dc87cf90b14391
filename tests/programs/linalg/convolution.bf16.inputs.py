import numpy as np


def _ints(rng, shape, lo=-4, hi=5, dtype=np.float32):
    return rng.integers(lo, hi, shape).astype(dtype)

import ml_dtypes


def inputs():
    rng = np.random.default_rng(23)
    x = (_ints(rng, (1, 4, 4, 3), 1, 9) * (1 + 2.0 ** -6)).astype(ml_dtypes.bfloat16)
    k = _ints(rng, (2, 2, 3, 2), -3, 4).astype(ml_dtypes.bfloat16)
    return [x, k]
