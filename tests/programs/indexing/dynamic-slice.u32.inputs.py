import numpy as np


def inputs():
    return [np.arange(10, dtype=np.int32), np.array(0xFFFFFFFF, np.uint32), np.array(200, np.uint8)]
