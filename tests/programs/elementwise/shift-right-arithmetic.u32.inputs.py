import numpy as np


def inputs():
    return [np.repeat(np.array([1, 2**32 - 1, 2**31, 2**31 - 1, 5, 0x80000001, 0, 0xF0F0F0F0], np.uint32), 8),
            np.tile(np.array([0, 1, 4, 31, 32, 33, 2**31, 2**32 - 1], np.uint32), 8)]
