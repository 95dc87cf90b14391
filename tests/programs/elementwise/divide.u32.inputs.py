import numpy as np


def inputs():
    return [np.array([7, 0, 5, 2**32 - 1, 2**32 - 1, 1, 2**31, 100], np.uint32),
            np.array([2, 0, 0, 1, 2**32 - 1, 2, 2**31 - 1, 7], np.uint32)]
