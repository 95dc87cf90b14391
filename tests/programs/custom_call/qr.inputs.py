import numpy as np


def inputs():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 6, 4)).astype(np.float32)
    a[1, :, 2] = 0                       # a zero column: a reflector with tau = 0
    return [a, rng.standard_normal((131, 130))]
