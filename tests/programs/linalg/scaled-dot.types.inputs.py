import ml_dtypes
import numpy as np


def inputs():
    rng = np.random.default_rng(11)
    ints = lambda shape, dt: rng.integers(-4, 5, shape).astype(dt)                      # noqa: E731
    pow2 = lambda shape, dt: (2.0 ** rng.integers(-3, 4, shape)).astype(dt)              # noqa: E731
    bf16, e8 = ml_dtypes.bfloat16, ml_dtypes.float8_e8m0fnu
    return [ints((4, 6), np.float32) / 2, (rng.integers(1, 8, (2, 3)) / 4).astype(bf16),
            ints((6, 5), np.float16), pow2((3, 1), bf16),
            ints((4, 6), bf16), ints((6, 5), ml_dtypes.float8_e5m2), pow2((3, 5), e8),
            rng.integers(-128, 128, (5, 6)).astype(np.int8), pow2((5, 3), e8), np.full((1, 1), 0.5, bf16),
            ints((4, 6), np.float64) / 4, pow2((4, 1), np.float32)]
