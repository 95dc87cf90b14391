import numpy as np


def inputs():
    rng = np.random.default_rng(32)
    return [rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((2, 15)).astype(np.float32)]
