import numpy as np


def inputs():
    rng = np.random.default_rng(51)
    x = (rng.standard_normal((4, 3, 5, 2)) * 2 + 3).astype(np.float32)
    f = (4, 3, 5, 2)[1]
    vec = lambda: rng.standard_normal(f).astype(np.float32)
    return [x, vec(), vec()]
