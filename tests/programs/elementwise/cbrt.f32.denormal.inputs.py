import numpy as np


def inputs():
    return [np.array([1e-40, -1e-40, 5e-39, -1e-45, 8.0, -27.0], np.float32)]
