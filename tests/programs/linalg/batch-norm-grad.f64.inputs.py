import numpy as np


def inputs():
    rng = np.random.default_rng(56)
    x = rng.standard_normal((3, 6))
    return [x, rng.standard_normal(3), x.mean(axis=1), x.var(axis=1), rng.standard_normal((3, 6))]
