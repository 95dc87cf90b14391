import numpy as np


def inputs():
    return [np.arange(12, dtype=np.int8).reshape(6, 2), -np.arange(1, 5, dtype=np.int8).reshape(4, 1),
            np.array(65535, np.uint16), np.array(1, np.uint16)]
