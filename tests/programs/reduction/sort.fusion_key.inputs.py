import numpy as np


def inputs():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((10, 6)).astype(np.float32)
    x[0] = [np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf]
    x[1] = [1.0, 1.0, -0.0, 0.0, -0.0, 1e-40]
    x[:, 5] = [2.0, -np.nan, 0.0, -0.0, 2.0, np.nan, -1.0, 1e-40, -1e-40, 2.0]
    return [x]
