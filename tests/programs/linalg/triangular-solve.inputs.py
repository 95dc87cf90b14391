import numpy as np


def inputs():
    rng = np.random.default_rng(43)
    a = (rng.standard_normal((2, 4, 4)) * 0.5 + 3 * np.eye(4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 3)).astype(np.float32)
    b[1, 2, 1] = np.nan
    c = rng.standard_normal((2, 3, 4)).astype(np.float32)
    return [a, b, c]
