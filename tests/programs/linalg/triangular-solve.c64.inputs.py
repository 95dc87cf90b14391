import numpy as np


def inputs():
    rng = np.random.default_rng(44)
    a = (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.complex64)
    b = (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(np.complex64)
    return [a, b]
