import numpy as np


def inputs():
    a = np.array([[2147483647, 2, -2147483648], [65536, 65536, 7]], np.int32)
    b = np.array([[2, -1], [3, 2147483647], [-1, 65536]], np.int32)
    return [a, b]
