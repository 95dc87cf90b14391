import numpy as np


def inputs():
    operand = np.array([0.0, -0.0, 1.0, -np.inf, 5.0, -0.0], np.float32)
    indices = np.array([[0], [1], [1], [2], [2], [3], [4], [0], [5], [5]], np.int32)
    updates = np.array([-0.0, 0.0, -0.0, np.nan, 3.0, -1e30, -0.0, -1.0, -0.0, -0.0], np.float32)
    return [operand, indices, updates]
