import numpy as np


def inputs():
    return [np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-40, -1e-40, 3.0, -3.0], np.float32)]
