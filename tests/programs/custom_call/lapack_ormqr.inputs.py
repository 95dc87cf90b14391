import numpy as np


def inputs():
    rng = np.random.default_rng(21)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)   # noqa: E731
    z = (rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))).astype(np.complex64)
    w = (rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))).astype(np.complex64)
    return [f(2, 5, 3), f(2, 5, 4), f(2, 6, 5), z, w]
