import numpy as np


import ml_dtypes


def inputs():
    bf = ml_dtypes.bfloat16
    i = np.array([[16777217, 2, -3], [257, 513, 2]], np.int32)
    j = np.array([[1, 2], [1, -1], [4, 16777217]], np.int32)
    f = np.array([[1.5, -2.75, 0.1], [1e10, 3.0, -0.5]], np.float32)
    g = np.array([[2.0, 1.0], [0.5, -1.5], [3.0, 2.0]], np.float32)
    u = np.array([[255, 128, 1], [0, 7, 200]], np.uint8)
    s = np.array([[-128, 1], [127, -1], [2, 3]], np.int8)
    h = np.array([[1.0, 2.0 ** -9, 3.0], [65504.0, 1.0, 1.0]], np.float32).astype(bf)
    k = np.array([[1.0, 1.5], [1.0, 2.0], [2.0 ** -10, 1.0]], np.float32).astype(bf)
    p = np.array([[True, False, True], [False, False, False]])
    q = np.array([[False, True], [True, True], [True, False]])
    return [i, j, f, g, u, s, h, k, p, q]
