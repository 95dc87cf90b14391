import numpy as np


def inputs():
    return [np.repeat(np.array([0, 1, 2, 3, 5, 254, 255, 128], np.uint8), 8),
            np.tile(np.array([0, 1, 2, 8, 127, 128, 200, 255], np.uint8), 8)]
