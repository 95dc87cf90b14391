import numpy as np


def inputs():
    nan = np.float32(np.nan)
    x = np.array([1, nan, -0.0, 0.0, 3, 3, nan, -np.inf, 1, 1, -0.0, 0.0, 2, 2, 2.5, 3], np.float32)
    y = np.array([5, 1, 2, 9, 4, 8, 0, 3, 7, 1, 6, 6, 3, 4, 2, 4], np.int32)
    return [x, y]
