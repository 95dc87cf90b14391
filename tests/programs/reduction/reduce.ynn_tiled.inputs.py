import numpy as np


def inputs():
    rng = np.random.default_rng(31)
    return [(rng.standard_normal((8, 14, 14, 64)) * 10 + 3).astype(np.float32),
            (rng.standard_normal((30, 1, 40, 50)) * 10 + 3).astype(np.float32)]
