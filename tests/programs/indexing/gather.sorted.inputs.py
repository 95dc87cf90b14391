import numpy as np


def inputs():
    return [np.arange(6, dtype=np.int16) * 10, np.array([[5], [1], [-3], [9]], np.int32)]
