import ml_dtypes
import numpy as np


def inputs():
    v = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)   # every bit pattern
    x, y = np.meshgrid(v, v, indexing="ij")
    return [x.ravel(), y.ravel()]
