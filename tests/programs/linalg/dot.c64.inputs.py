import numpy as np


def inputs():
    a = np.array([[1 + 2j, -1j, 3], [0.5 - 0.5j, 2 + 0j, -4 + 1j]], np.complex64)
    b = np.array([[1j, 2], [3 - 1j, 0.25j], [-1, 1 + 1j]], np.complex64)
    return [a, b]
