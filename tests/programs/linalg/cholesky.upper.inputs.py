import numpy as np


def inputs():
    rng = np.random.default_rng(42)
    m = rng.standard_normal((4, 4))
    a = (m @ m.T + 4 * np.eye(4)).astype(np.float32)
    a[3, 0] = -99.0
    z = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    c = (z @ z.conj().T + 4 * np.eye(4)).astype(np.complex64)
    return [a, c]
