import numpy as np


def inputs():
    nan = np.float32(np.nan)
    mnan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    x = np.array([1, nan, -0.0, 0.0, 3, 3, mnan, -np.inf, np.inf, 1, -0.0, 0.0, 1e-40, -1e-40, 2.5, -7],
                 np.float32)
    y = np.random.default_rng(1).integers(-3, 4, (3, 20)).astype(np.float32)
    return [x, y]
