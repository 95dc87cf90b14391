import numpy as np


def inputs():
    return [np.random.default_rng(5).standard_normal((3, 50)).astype(np.float32) * 10]
