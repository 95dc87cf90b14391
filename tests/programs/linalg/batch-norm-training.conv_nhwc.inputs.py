import numpy as np


def inputs():
    rng = np.random.default_rng(41)
    # inputs near per-feature levels: the convolution's channels are nearly constant in half
    # of them (small spread), so their one-pass variance rounds to about -epsilon or below
    level = rng.uniform(20, 60, (1, 16, 1, 1)).astype(np.float32)
    spread = np.where(np.arange(16) % 2 == 0, 1e-6, 0.5).astype(np.float32).reshape(1, 16, 1, 1)
    x = (level + spread * rng.standard_normal((2, 16, 40, 40))).astype(np.float32)
    w = rng.uniform(0, 1, (32, 16, 1, 1)).astype(np.float32)
    w[::2] *= (np.arange(16) % 2 == 0).astype(np.float32).reshape(1, 16, 1, 1)   # even channels: even inputs
    vec = lambda: rng.standard_normal(32).astype(np.float32)
    xl = (rng.standard_normal((3, 16, 16, 16)) * 2 + 1).astype(np.float32)
    wl = rng.standard_normal((1, 1, 16, 32)).astype(np.float32)
    return [x, w, vec(), vec(), xl, wl]
