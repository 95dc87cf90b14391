import runpy
from pathlib import Path

import ml_dtypes
import numpy as np

# normal values with NaN of both signs, infinities, signed zeros and subnormals mixed in
_with_specials = runpy.run_path(str(Path(__file__).with_name("reduce.minmax_large.inputs.py")))["_with_specials"]


def inputs():
    rng = np.random.default_rng(33)
    return [_with_specials(rng, (2, 64, 64, 2), ml_dtypes.bfloat16, 0.05),
            _with_specials(rng, (64, 64), np.float16, 0.05)]
