import numpy as np


def inputs():
    return [np.array([3, -7, 1], np.int32), np.array([0xF0, 0x0F, 0xFF], np.uint8),
            np.array([0, 1, 0, 2, 1, 0], np.int32),
            np.array([65536, 65536, 2147483647, -1, -3, 5], np.int32),
            np.array([0x3C, 0xAA, 200, 0x81, 0x7E, 1], np.uint8)]
