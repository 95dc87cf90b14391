import numpy as np


def inputs():
    a = np.tril(np.ones((4, 4), np.float32)) + np.eye(4, dtype=np.float32)
    a[2, 2] = 0.0
    return [a, np.ones((4, 2), np.float32)]
