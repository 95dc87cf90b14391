import numpy as np


def inputs():
    a = np.array([[1e-310, 1.0, 2.0, 3.0], [0.25, -0.5, 1e300, 1e-300], [1.0, 2.0, 3.0, 4.0]])
    b = np.array([[1e10, 1.0], [2.0, -1.0], [1e-8, 0.5], [1e-10, 1e300]])
    return [a, b]
