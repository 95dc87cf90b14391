import numpy as np


def inputs():
    nan = np.float32(np.nan)
    mnan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    d = np.float32(1e-40)
    x = np.array([
        [1, nan, -2, 3, mnan, 0],
        [-1, -2, nan, -3, 5, -0.0],
        [-0.0, 0.0, -0.0, -0.0, -5, -1],
        [-0.0, -0.0, -1, -7, -0.0, -3],
        [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
        [d, -1, -2, -3, -4, -5],
        [d, 0.0, -1, -2, -3, -4],
        [-d, d, -1, 1, 2, 3],
        [mnan, 1, 2, nan, -1, 4],
        [3, 2, 1, -1, 2, mnan],
    ], np.float32)
    return [x]
