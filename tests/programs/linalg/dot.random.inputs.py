import numpy as np


def inputs():
    rng = np.random.default_rng(3)
    return [rng.standard_normal((6, 33)).astype(np.float32), rng.standard_normal((33, 7)).astype(np.float32)]
