import numpy as np


def inputs():
    rng = np.random.default_rng(4)
    # 1 + k 2^-11: products and two-term sums are exact in f32, but not after rounding the
    # operands to bf16, tf32 or f16 (a rounding algorithm would show)
    a = (1 + rng.integers(1, 8, (3, 2)) * 2.0 ** -11).astype(np.float32)
    b = (1 + rng.integers(1, 8, (2, 2)) * 2.0 ** -11).astype(np.float32)
    return [a, b]
