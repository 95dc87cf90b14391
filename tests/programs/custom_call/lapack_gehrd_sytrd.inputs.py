import numpy as np

try:   # jaxlib's LAPACK kernels need their function table before XLA can run them (golden making only)
    from jaxlib import lapack as _lapack
    _lapack._lapack.initialize()
except Exception:  # noqa: BLE001 -- not needed to run the interpreter
    pass


def inputs():
    rng = np.random.default_rng(74)
    z = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    return [rng.standard_normal((2, 5, 5)).astype(np.float32), (z + z.conj().T).astype(np.complex64)]
