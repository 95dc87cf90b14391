import numpy as np


def inputs():
    return [np.array([-6 - 0j, -6 + 0j, -0.0 + 0j, 4 - 0j, 1e-30 + 0j, -1 + 1e-20j], np.complex64)]
