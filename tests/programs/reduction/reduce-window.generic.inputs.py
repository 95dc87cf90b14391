import numpy as np


def inputs():
    return [np.random.default_rng(2).standard_normal(40).astype(np.float32) * 10]
