import numpy as np


def _ints(rng, shape, lo=-4, hi=5, dtype=np.float32):
    return rng.integers(lo, hi, shape).astype(dtype)

def inputs():
    rng = np.random.default_rng(5)
    return [_ints(rng, (11, 5)), _ints(rng, (3, 5, 7)), np.array([2, 4, 3], np.int32)]
