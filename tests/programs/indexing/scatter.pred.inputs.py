import numpy as np


def inputs():
    return [np.array([[1, 0, 1, 0], [0, 0, 1, 1]], bool), np.array([[1], [0], [1]], np.int32),
            np.array([[1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]], bool)]
