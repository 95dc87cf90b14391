import ml_dtypes
import numpy as np


def inputs():
    return [np.arange(0, 4).astype(np.uint8).astype(ml_dtypes.uint2)]   # every value
