import numpy as np


def inputs():
    return [np.arange(1, 7, dtype=np.int32).reshape(2, 3), np.zeros((2, 3, 0), np.int32),
            np.arange(10, 70, 10, dtype=np.int32).reshape(2, 3)]
