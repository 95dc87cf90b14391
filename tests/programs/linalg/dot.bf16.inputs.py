import numpy as np


import ml_dtypes


def inputs():
    bf = ml_dtypes.bfloat16
    a = np.array([[1.5, -2.25, 3.0, 0.5, 1.0, -1.0],
                  [1e30, 1e30, 1.0, 0.0, -0.0, 2.0],
                  [3.0, 5.0, 7.0, 11.0, 13.0, 17.0],
                  [1e-39, 2.0, np.inf, 1.0, 1.0, 1.0]], np.float32).astype(bf)
    b = np.array([[1.0, 2.0, 0.0078125], [1e30, -1.0, 0.5], [-1.0, 0.25, 255.0],
                  [2.0, 2.0, 2.0], [1.0, -3.0, 1.0], [0.5, 1.0, -1.0]], np.float32).astype(bf)
    return [a, b]
