import numpy as np


def inputs():
    return [np.array([2**-20, 2048, 65504], np.float16), np.array([[0], [0], [1], [1], [2]], np.int32),
            np.array([2**-24, -2**-14, 1, 1, 32], np.float16)]
