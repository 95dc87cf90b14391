import numpy as np

try:   # jaxlib's LAPACK kernels need their function table before XLA can run them (golden making only)
    from jaxlib import lapack as _lapack
    _lapack._lapack.initialize()
except Exception:  # noqa: BLE001 -- not needed to run the interpreter
    pass


def inputs():
    a = np.array([[0.0, -2.0, 1.0, 0.5], [2.0, 0.0, 0.0, 1.0], [0.0, 1.0, 3.0, 0.0], [1.0, 0.0, 0.5, -1.0]], np.float32)
    rng = np.random.default_rng(71)
    c = (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))).astype(np.complex64)
    return [a, c]
