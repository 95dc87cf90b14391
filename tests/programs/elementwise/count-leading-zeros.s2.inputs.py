import ml_dtypes
import numpy as np


def inputs():
    return [np.arange(-2, 2).astype(np.int8).astype(ml_dtypes.int2)]   # every value
