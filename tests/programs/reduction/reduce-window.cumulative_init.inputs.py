import numpy as np


def inputs():
    return [np.ones(40, np.int32)]
