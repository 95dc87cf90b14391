import numpy as np


def inputs():
    rng = np.random.default_rng(29)
    return [(rng.standard_normal((8, 20, 16, 16)) * 10 + 3).astype(np.float32)]
