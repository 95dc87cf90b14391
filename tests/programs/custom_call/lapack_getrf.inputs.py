import numpy as np

try:   # jaxlib's LAPACK kernels need their function table before XLA can run them (golden making only)
    from jaxlib import lapack as _lapack
    _lapack._lapack.initialize()
except Exception:  # noqa: BLE001 -- not needed to run the interpreter
    pass


def inputs():
    rng = np.random.default_rng(65)
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    s = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    return [a, w, s]
