"""States for rng-bit-generator.default.signed_float.hlo: a digits-of-pi seed, a small JAX-like seed, and one whose counter
wraps around during the call (the low counter word wraps; for Philox the all-ones key is also the high word, which wraps too)."""
import numpy as np

SEEDS = [
    [0x243F6A8885A308D3, 0x13198A2E03707344],
    [42, 0],
    [0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFD],
]


def inputs():
    return [np.array(s, np.uint64) for s in SEEDS[:3]]
