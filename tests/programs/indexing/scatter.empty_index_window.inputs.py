import numpy as np


def inputs():
    return [np.full(4, 1000, np.float32), np.zeros((3, 0), np.int32),
            np.array([[1, 2], [10, 20], [100, 200]], np.float32)]
