import numpy as np


def inputs():
    return [np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)]
