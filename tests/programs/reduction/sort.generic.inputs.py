import numpy as np


def inputs():
    return [np.random.default_rng(9).integers(-6, 7, (3, 37)).astype(np.float32)]
