import numpy as np


def inputs():
    rng = np.random.default_rng(55)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    x = f(3, 4, 5) * 2 + 1
    return [x, f(4), x.mean(axis=(0, 2)), x.var(axis=(0, 2)), f(3, 4, 5)]
