import ml_dtypes
import numpy as np


def inputs():
    rng = np.random.default_rng(10)
    f8, e8 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
    a = rng.integers(-3, 4, (6, 32)).astype(np.float32)
    a[0, :4] = [448, -448, 448, 448]
    a[1, 0], a[1, 17] = np.nan, -0.0
    a[2, :3] = [2.0 ** -9, -2.0 ** -9, 2.0 ** -7]          # f8e4m3fn subnormals
    a[3] = 0.0                                             # all zero: +0 even with -0 terms
    a[3, 5] = -0.0
    b = rng.integers(-3, 4, (32, 3)).astype(np.float32)
    b[:, 2] = 1.0
    sa = np.array([[2.0 ** 127, 2.0 ** 120], [1.0, 1.0], [2.0 ** -127, 2.0 ** -120],
                   [1.0, 1.0], [np.nan, 1.0], [2.0 ** -126, 2.0 ** 100]], np.float32)
    sb = np.array([[1.0, 2.0, 2.0 ** -10], [4.0, 2.0 ** -127, 2.0 ** 10]], np.float32)
    return [a.astype(f8), b.astype(f8), sa.astype(e8), sb.astype(e8)]
