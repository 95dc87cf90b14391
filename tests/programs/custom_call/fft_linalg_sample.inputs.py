import numpy as np

try:   # jaxlib's LAPACK kernels need their function table before XLA can run them (golden making only)
    from jaxlib import lapack as _lapack
    _lapack._lapack.initialize()
except Exception:  # noqa: BLE001 -- not needed to run the interpreter
    pass


from pathlib import Path


def inputs():
    root = Path(__file__).resolve().parents[3]
    d = np.load(root / "samples" / "jax" / "fft_linalg.inputs.npz")
    a, b = d["arg4"].astype(np.float32), d["arg5"].astype(np.float32)
    spd = (a @ a.T / 2 + 4 * np.eye(4)).astype(np.float32)
    return [a, spd, b]
