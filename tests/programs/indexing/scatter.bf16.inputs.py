import ml_dtypes
import numpy as np


def inputs():
    return [np.array([256, 1, -0.0], ml_dtypes.bfloat16), np.array([[0], [0], [1], [1], [2], [0]], np.int32),
            np.array([1, 1, 256, 1, -0.0, 3], ml_dtypes.bfloat16)]
