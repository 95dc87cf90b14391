"""Regenerate samples/torch_xla_spmd: PyTorch/XLA SPMD programs dumped by XLA on 8 CPU devices.

Run with the Python that has torch and torch_xla of the same release (see gen_producer_samples.py):

    /work/venv-torch/bin/python scripts/gen_torch_spmd_samples.py

For each case the graph PyTorch/XLA compiles at `xm.mark_step()` is dumped by XLA
(`--xla_dump_to`): NAME.hlo is the module before optimizations (global shapes, `sharding=`
annotations, `num_partitions=8` in its header), NAME.opt.hlo the partitioned per-device module XLA
CPU ran.  NAME.inputs.npz holds the global inputs in parameter order (the device data the graph
reads, as `_get_tensors_xla_device_data_node` lists them, checked against the parameters' shapes),
NAME.expected.npz the global results
PyTorch/XLA returned (out0, ...), NAME.json the output shardings PyTorch/XLA reports.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "samples" / "torch_xla_spmd"


def _mlp(torch, xs, mesh, dev):
    """Linear -> tanh -> Linear, MSE loss, backward: data parallel over 'data', the hidden layer
    split over 'model' (Megatron style)."""
    torch.manual_seed(0)
    x = torch.randn(8, 12).to(dev)
    y = torch.randn(8, 6).to(dev)
    w1 = torch.randn(12, 16).mul_(0.3).to(dev).requires_grad_()
    w2 = torch.randn(16, 6).mul_(0.3).to(dev).requires_grad_()
    xs.mark_sharding(x, mesh, ("data", None))
    xs.mark_sharding(y, mesh, ("data", None))
    xs.mark_sharding(w1, mesh, (None, "model"))
    xs.mark_sharding(w2, mesh, ("model", None))
    h = torch.tanh(x @ w1)
    loss = ((h @ w2 - y) ** 2).mean()
    loss.backward()
    return [loss, w1.grad, w2.grad]


def _matmul(torch, xs, mesh, dev):
    """tanh(x @ w) summed over its columns; x split by rows, w by columns."""
    torch.manual_seed(1)
    x = torch.randn(8, 16).to(dev)
    w = torch.randn(16, 4).to(dev)
    xs.mark_sharding(x, mesh, ("data", None))
    xs.mark_sharding(w, mesh, (None, "model"))
    return [torch.tanh(x @ w).sum(dim=1)]


CASES = {"mlp_train_step_4x2": _mlp, "matmul_4x2": _matmul}


def _child(name: str, dump: str) -> None:
    os.environ["PJRT_DEVICE"] = "CPU"
    import numpy as np
    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    assert n == 8, f"expected 8 devices, got {n}"
    mesh = xs.Mesh(np.arange(n), (4, 2), ("data", "model"))
    dev = xm.xla_device()
    import torch_xla
    outputs = CASES[name](torch, xs, mesh, dev)
    # the graph's parameters: the device data it reads, in parameter order (inputs, weights and the
    # scalars PyTorch/XLA makes device data, e.g. the loss's divisor)
    _, data = torch_xla._XLAC._get_tensors_xla_device_data_node(outputs)
    params = [a.detach().cpu().numpy() for a in data]
    torch_xla._XLAC._xla_sync_multi(outputs, devices=[], wait=True)
    host_out = [t.detach().cpu().numpy() for t in outputs]
    shardings = [str(torch_xla_sharding(t)) for t in outputs]
    np.savez(os.path.join(dump, "io.npz"), **{f"arg{k}": a for k, a in enumerate(params)},
             **{f"out{k}": a for k, a in enumerate(host_out)})
    Path(dump, "shardings.json").write_text(json.dumps(shardings))


def torch_xla_sharding(t):
    import torch_xla
    return torch_xla._XLAC._get_xla_sharding_spec(t)


def _param_shapes(text: str) -> list[tuple[int, ...]]:
    entry = text[text.index("\nENTRY"):]
    params = re.findall(r"= [a-z0-9]+\[([0-9,]*)\][^ ]* parameter\((\d+)\)", entry)
    shapes = sorted(((int(k), tuple(int(d) for d in dims.split(",") if d)) for dims, k in params))
    return [s for _, s in shapes]


def main() -> None:
    import subprocess

    import numpy as np
    OUT.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        dump = tempfile.mkdtemp(prefix="hlo-torch-spmd-")
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count=8 --xla_dump_to={dump}",
                   PJRT_DEVICE="CPU", CPU_NUM_DEVICES="8")
        subprocess.run([sys.executable, __file__, "--child", name, dump], check=True, env=env)
        before = [f for f in glob.glob(f"{dump}/module_*.before_optimizations.txt") if "SyncTensorsGraph" in f]
        if len(before) != 1:
            raise SystemExit(f"{name}: expected one SyncTensorsGraph module, got {before}")
        after = before[0].replace(".before_optimizations.txt", ".cpu_after_optimizations.txt")
        text = Path(before[0]).read_text()
        io = np.load(os.path.join(dump, "io.npz"))
        args = [io[k] for k in sorted((k for k in io.files if k.startswith("arg")), key=lambda k: int(k[3:]))]
        shapes = _param_shapes(text)
        if [a.shape for a in args] != shapes:
            raise SystemExit(f"{name}: device data {[a.shape for a in args]} vs parameters {shapes}")
        shutil.copy(before[0], OUT / f"{name}.hlo")
        shutil.copy(after, OUT / f"{name}.opt.hlo")
        np.savez(OUT / f"{name}.inputs.npz", **{f"arg{k}": a for k, a in enumerate(args)})
        np.savez(OUT / f"{name}.expected.npz", **{k: io[k] for k in io.files if k.startswith("out")})
        import torch_xla
        meta = {"producer": f"torch_xla {torch_xla.__version__}", "mesh": {"data": 4, "model": 2},
                "output_shardings": json.loads(Path(dump, "shardings.json").read_text())}
        (OUT / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        shutil.rmtree(dump)
        print("wrote", name)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        main()
