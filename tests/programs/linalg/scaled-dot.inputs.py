import numpy as np


def _ints(rng, shape, lo=-4, hi=5, dtype=np.float32):
    return rng.integers(lo, hi, shape).astype(dtype)

def inputs():
    rng = np.random.default_rng(8)
    return [_ints(rng, (3, 8)), _ints(rng, (3, 2), 1, 4) / 2, _ints(rng, (8, 4)), _ints(rng, (2, 4), 1, 4)]
