import numpy as np


def inputs():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    idx = np.array([[[0, 1, 4], [3, -1, 9]], [[2, 2, -5], [0, 3, 1]]], np.int32)
    return [x, idx]
