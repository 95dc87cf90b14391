import numpy as np


def inputs():
    rng = np.random.default_rng(3)
    special = [0, 1, -1, 2**24 + 1, 2**24 + 3, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 2**53 + 1, 2**40 + 2**16 + 1,
               2**24 + 2**16 + 1, 2**60 + 2**36 + 1, 2**40 + 2**32 + 1, 300, 449, 464, 465, 65519, 65520, 70000]
    m = rng.integers(2**23, 2**24, 40).astype(np.int64) << rng.integers(0, 39, 40)
    return [np.concatenate([np.array(special, np.int64), m + rng.integers(0, 3, 40), -m]).astype(np.int32)]
