import ml_dtypes
import numpy as np


def inputs():
    return [np.arange(-8, 8).astype(np.int8).astype(ml_dtypes.int4)]   # every value
