import numpy as np


def inputs():
    rng = np.random.default_rng(0)
    re = np.concatenate([[0.5, -0.5, 2.0, -2.0, 0.25, 3.0], rng.uniform(-4, 4, 26)])
    im = np.concatenate([[0.5, 1.0, -1.5, 0.75, -3.0, 0.1], rng.uniform(-4, 4, 26)])
    return [(re + 1j * im).astype(np.complex64)]
