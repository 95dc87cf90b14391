import numpy as np


def inputs():
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e-45, 3e-39, 1.1754942e-38,
                        65504.0, 65519.0, 65520.0, 70000.0, 448.0, 464.0, 465.0, 57344.0, 61440.0, 240.0, 248.0,
                        6.0, 7.0, 1e-7, 6e-8, 2.9e-8, 3e38, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20,
                        1 + 2**-4 + 2**-20, 1 + 2**-3 + 2**-20, 0.1, 1.5 * 2**-127, 2**-128], np.float64)
    ties = (rng.integers(2**20, 2**21, 40) * 2.0 ** rng.integers(-30, 10, 40)) / 2**20 * (1 + 2**-8)
    return [np.concatenate([special, ties, rng.standard_normal(40) * 100]).astype(np.float32)]
