import numpy as np


def inputs():
    rng = np.random.default_rng(31)
    return [(rng.standard_normal((3, 16)) + 1j * rng.standard_normal((3, 16))).astype(np.complex64)]
