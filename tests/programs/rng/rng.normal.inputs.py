"""(mu, sigma) per element type for rng.normal.hlo, in parameter order."""
import ml_dtypes
import numpy as np

PARAMS = [(np.float32, 3, 2), (np.float64, -1, 0.5), (np.float16, 1, 2), (ml_dtypes.bfloat16, 0, 4)]


def inputs():
    return [np.array(v, t) for t, mu, sigma in PARAMS for v in (mu, sigma)]
