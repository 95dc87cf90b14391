import numpy as np


def inputs():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 6, 6)).astype(np.float32)
    a[1] = np.diag(np.arange(6, dtype=np.float32))        # already diagonal: no rotation moves it
    b = (rng.standard_normal((3, 5, 5)) + 1j * rng.standard_normal((3, 5, 5))).astype(np.complex64)
    c = rng.standard_normal((9, 9))
    c[:, 4] = c[4, :] = 0                                 # a zero row/column: a zero eigenvalue
    return [a, b, c]
