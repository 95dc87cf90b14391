import numpy as np


import ml_dtypes


def inputs():
    bf = ml_dtypes.bfloat16
    a = np.array([[1.0, 2.0 ** -8, 2.0 ** -8], [1.0, 2.0 ** -8, 0.0], [1.0, 3 * 2.0 ** -9, 2.0 ** -9]],
                 np.float32).astype(bf)
    b = np.ones((3, 1), np.float32).astype(bf)
    return [a, b]
