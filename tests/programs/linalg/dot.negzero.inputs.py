import numpy as np


def inputs():
    a = np.array([[-0.0], [0.0], [-2.0]], np.float32)
    b = np.array([[1.0, -0.0]], np.float32)
    c = np.array([[-0.0, -0.0], [0.0, -0.0], [1.0, -1.0]], np.float32)
    e = np.array([[1.0, -1.0, 0.0, 2.0], [1.0, -1.0, -0.0, 2.0]], np.float32)
    return [a, b, c, e]
