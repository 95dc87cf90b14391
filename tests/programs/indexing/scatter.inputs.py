import numpy as np


def inputs():
    operand = np.array([[0, 0, 0], [1e8, 1, 0.5], [-0.0, np.inf, 3], [7, 7, 7]], np.float32)
    indices = np.array([[0], [0], [0], [1], [2], [1], [1]], np.int32)
    updates = np.array([[1e8, 1, 1e8], [1, 1e8, -1e8], [-1e8, -1e8, 1], [-1e8, -1, 1e-8],
                        [-0.0, -np.inf, np.nan], [1, 1e8, 2], [1, -1e8, 3]], np.float32)
    return [operand, indices, updates]
