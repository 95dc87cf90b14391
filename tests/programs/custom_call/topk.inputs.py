import numpy as np


def inputs():
    nan = np.nan
    return [np.array([[1.0, 3.0, 3.0, -0.0, 0.0, 2.0, 3.0, -1.0],
                      [nan, -np.inf, np.inf, 1.0, -nan, 5.0, 0.0, 1.0],
                      [-0.0, 0.0, -0.0, 0.0, -1.0, -2.0, -3.0, -4.0]], np.float32)]
