import numpy as np


def inputs():
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((4, 160, 7, 7)) * 3 + 1).astype(np.float32)
    x[1, 7, 3, 4] = np.nan
    x[2, 9, 0, 0] = np.inf
    return [x]
