import numpy as np


def inputs():
    rng = np.random.default_rng(52)
    x = (rng.standard_normal((40, 3, 4)) * 2 + 3).astype(np.float32)
    f = (40, 3, 4)[2]
    vec = lambda: rng.standard_normal(f).astype(np.float32)
    return [x, vec(), vec()]
