import numpy as np


def inputs():
    # No subnormals here: LLVM turns select(a > b, a, b) into maxss, which flushes them -- an
    # instruction-selection detail the generic fold (select keeps bits) does not model.
    nan = np.float32(np.nan)
    mnan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    x = np.array([
        [1, nan, -2, 3, mnan, 0],
        [-1, -2, nan, -3, 5, -0.0],
        [-0.0, 0.0, -0.0, -0.0, -5, -1],
        [-0.0, -0.0, -1, -7, -0.0, -3],
        [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
        [2, 2, -2, 2, -4, -5],
        [3, 1, 3, -1, 3, -4],
        [-1, 1, -1, 1, 2, 2],
        [mnan, 1, 2, nan, -1, 4],
        [3, 2, 1, -1, 2, nan],
    ], np.float32)
    return [x]
