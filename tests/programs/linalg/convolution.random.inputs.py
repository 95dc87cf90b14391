import numpy as np


def inputs():
    rng = np.random.default_rng(21)
    return [rng.standard_normal((2, 7, 7, 5)).astype(np.float32), rng.standard_normal((3, 3, 5, 6)).astype(np.float32)]
