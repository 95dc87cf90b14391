import numpy as np


def inputs():
    x = np.array([1, -1, -8, 5, -2**31, 2**31 - 1, 0x12345678, -0x12345678], np.int32)
    n = np.array([0, 1, 3, 31, 32, 33, 100, -1, -32, -2**31], np.int32)
    a, b = np.meshgrid(x, n, indexing="ij")
    return [a.ravel(), b.ravel()]
