import numpy as np


def inputs():
    nan = np.float32(np.nan)
    x = np.array([1, 3, 3, 2, 3, 1, 0, 5, nan, 1, -0.0, 0.0, 1e-40, 0, 2, 2], np.float32)
    src = (2.0 ** np.arange(15)).astype(np.float32)
    return [x, src]
