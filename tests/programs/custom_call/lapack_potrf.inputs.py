import numpy as np

try:   # jaxlib's LAPACK kernels need their function table before XLA can run them (golden making only)
    from jaxlib import lapack as _lapack
    _lapack._lapack.initialize()
except Exception:  # noqa: BLE001 -- not needed to run the interpreter
    pass


def inputs():
    rng = np.random.default_rng(61)
    m = rng.standard_normal((3, 4, 4))
    a = (m @ m.transpose(0, 2, 1) + np.eye(4)).astype(np.float32)
    a[0, 0, 3] = 99.0
    a[1, 2, 2] = -40.0
    return [a]
