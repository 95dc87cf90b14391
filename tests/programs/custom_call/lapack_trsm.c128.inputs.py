import numpy as np

try:   # jaxlib's LAPACK kernels need their function table before XLA can run them (golden making only)
    from jaxlib import lapack as _lapack
    _lapack._lapack.initialize()
except Exception:  # noqa: BLE001 -- not needed to run the interpreter
    pass


def inputs():
    rng = np.random.default_rng(64)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3)) + 3 * np.eye(3)
    return [a, rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))]
