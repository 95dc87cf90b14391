import ml_dtypes
import numpy as np


def _with_specials(rng, shape, dt, rate):
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e-5, -3e-5], np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    x = np.where(rng.random(shape) < rate, rng.choice(specials, shape), x)
    return x.astype(dt)


def inputs():
    rng = np.random.default_rng(21)
    x = _with_specials(rng, (64, 64), ml_dtypes.bfloat16, 0.02)
    x[5] = np.array([-0.0, 1e-40], np.float32).astype(ml_dtypes.bfloat16)[rng.integers(0, 2, 64)]
    y = _with_specials(rng, (2, 2048), np.float16, 0.002)
    y[:, ::7] = np.float16(0.0)
    z = _with_specials(rng, (63, 65), ml_dtypes.bfloat16, 0.02)
    return [x, y, z]
