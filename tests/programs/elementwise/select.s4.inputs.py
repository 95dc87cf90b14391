import ml_dtypes
import numpy as np


def inputs():
    v = np.arange(-8, 8).astype(np.int8).astype(ml_dtypes.int4)
    return [np.arange(16) % 3 == 0, v, v[::-1].copy()]
