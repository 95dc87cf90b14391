import numpy as np


def inputs():
    return [np.array([-2**63, -2**63, 7, -7, 2**63 - 1, 5], np.int64),
            np.array([-1, 0, 0, 2, -1, -3], np.int64)]
