import numpy as np


def inputs():
    x = np.arange(30, dtype=np.float32).reshape(3, 5, 2)
    idx = np.array([[[0], [4], [2]], [[1], [-3], [9]], [[3], [3], [0]], [[2], [1], [4]]], np.int32)
    return [x, idx]
