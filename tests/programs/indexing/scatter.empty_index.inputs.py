import numpy as np


def inputs():
    return [np.full(4, 1000, np.float32), np.zeros((3, 0), np.int32), np.array([1, 10, 100], np.float32)]
