import numpy as np


def inputs():
    lo = np.array([0, 0, 0, 5, 5, 5, np.nan, 0, -0.0, 0.0, 1e-40, 0], np.float32)
    x = np.array([-1, 0.5, 2, -1, 3, 9, 1, np.nan, 0.0, -0.0, -1, 1e-40], np.float32)
    hi = np.array([1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1], np.float32)
    return [lo, x, hi]
