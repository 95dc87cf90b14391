"""NaN and Inf at full speed: `hlo` against XLA CPU on finite and non-finite inputs, side by side,
each at 1 and 2 cores (`taskset`; hlo's threads and XLA's pool both follow the affinity).

Whole step (--step MODULE.hlo): XLA (compile, then execute) and hlo (run_module, parse excluded) on
the same inputs, each in its own child process: --inputs ARGS.npz, or hlo's --random-inputs
(seed 0), which make XLA's MobileNetV2 training step (XLA's tools data, PyTorch/XLA, batch 96:
xla/tools/data/benchmarking/mobilenet_v2.hlo) NaN in 202 of its 314 results (a batch norm's
one-pass variance goes negative), and --finite-inputs (positive uniform [0.5, 1.5), as
bench_convnet's per-op inputs), on which it stays finite.  The results are compared: NaN, +inf and
-inf at the same positions as XLA's, and the NaN bits where XLA's NaNs all share one.

Per op (--per-op): the --limit largest distinct convolutions, reduce-windows, batch norms and dots
of the step, as one-instruction modules (bench_convnet.one_op_module) on three inputs: finite
(uniform [0.5, 1.5)), "nan" (the first operand all NaN) and "mixed" (1% each of NaN, +inf and -inf
in every float operand).

    python benchmarks/bench_nonfinite.py --step /tmp/mobilenet_v2.hlo [--finite-inputs] [--cores 1 2]
    python benchmarks/bench_nonfinite.py --step /tmp/mobilenet_v2.hlo --per-op --limit 8
        [--opcodes convolution] [--match 'size=3x3' ...]

Writes benchmarks/results/nonfinite.json (rows appended, keyed by what and cores).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results"


def _load_args(module, inputs, finite):
    import numpy as np
    if inputs:
        with np.load(inputs) as z:
            return [z[f"arg{k}"] for k in range(len(z.files))]
    if finite:
        from bench_convnet import _random_inputs
        return _random_inputs(module)
    from hlo_cli.interpreter.inputs import random_inputs
    return [np.asarray(a) for a in random_inputs(module.entry_computation.parameters, 0)]


def child(side, step, inputs, finite, repeat, out):
    import numpy as np
    from hlo_cli.parser import parse
    text = Path(step).read_text()
    module = parse(text, step)
    args = _load_args(module, inputs, finite)
    if side == "xla":
        from hlo_cli.tools.xla_reference import XlaExecutable
        exe = XlaExecutable(text)
        run = lambda: exe(args)                          # noqa: E731
    else:
        from hlo_cli.interpreter import RunOptions, run_module
        from hlo_cli.interpreter.inputs import bind
        values = bind(module.entry_computation.parameters, args)
        run = lambda: run_module(module, values, RunOptions())      # noqa: E731
    best = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        res = run()
        best = min(best, time.perf_counter() - s)
    from bench_convnet import _flatten
    leaves = _flatten(res, []) if side == "hlo" else list(res)
    np.savez(out, **{f"out{k}": np.asarray(v) for k, v in enumerate(leaves)})
    return {"execute_s": best}


def _spawn(side, args, cores, out):
    cmd = ["taskset", "-c", ",".join(str(c) for c in range(cores)), sys.executable, __file__, "--child", side,
           "--step", args.step, "--repeat", str(args.repeat), "--out", out]
    if args.inputs:
        cmd += ["--inputs", args.inputs]
    if args.finite_inputs:
        cmd.append("--finite-inputs")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode:
        raise SystemExit(f"{side} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def compare_nonfinite(ours, xla):
    """How the two result sets agree where XLA's values are not finite."""
    import numpy as np
    rows = {"results": 0, "with_nan": 0, "nan_positions_equal": 0, "inf_positions_equal": 0,
            "nan_bits_equal": 0, "finite_max_rel_diff": 0.0}
    with np.load(ours) as a, np.load(xla) as b:
        for k in b.files:
            g, w = a[k], b[k]
            rows["results"] += 1
            if w.dtype.kind != "f":
                continue
            gn, wn = np.isnan(g), np.isnan(w)
            rows["with_nan"] += bool(wn.any())
            rows["nan_positions_equal"] += bool(np.array_equal(gn, wn))
            rows["inf_positions_equal"] += bool(np.array_equal(np.isposinf(g), np.isposinf(w))
                                                and np.array_equal(np.isneginf(g), np.isneginf(w)))
            u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[w.dtype.itemsize]
            both = gn & wn
            rows["nan_bits_equal"] += bool(np.array_equal(g[both].view(u), w[both].view(u)))
            fin = np.isfinite(w) & np.isfinite(g)
            if fin.any():
                d = np.abs(g[fin].astype(np.float64) - w[fin]) / (1 + np.abs(w[fin].astype(np.float64)))
                rows["finite_max_rel_diff"] = max(rows["finite_max_rel_diff"], float(d.max()))
    return rows


def step_rows(args):
    rows = []
    for cores in args.cores:
        with tempfile.TemporaryDirectory() as tmp:
            xo, ho = os.path.join(tmp, "xla.npz"), os.path.join(tmp, "hlo.npz")
            x = _spawn("xla", args, cores, xo)
            h = _spawn("hlo", args, cores, ho)
            row = {"what": "step", "module": Path(args.step).name,
                   "inputs": args.inputs or ("finite" if args.finite_inputs else "hlo --random-inputs"),
                   "cores": cores, "xla_execute_s": x["execute_s"], "hlo_execute_s": h["execute_s"],
                   "ratio": h["execute_s"] / x["execute_s"], "agreement": compare_nonfinite(ho, xo),
                   "load_average": list(os.getloadavg()), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _variant(args, kind, rng):
    import numpy as np
    out = []
    for k, a in enumerate(args):
        a = np.array(a)
        if a.dtype.kind == "f" and a.ndim:
            if kind == "nan" and k == 0:
                a[...] = np.nan
            elif kind == "mixed":
                for val in (np.nan, np.inf, -np.inf):
                    a[rng.random(a.shape) < 0.01] = val
        out.append(a)
    return out


def per_op_child(args):
    import numpy as np
    from bench_convnet import _best, _random_inputs, _xla_execute_only, distinct_ops
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.interpreter.inputs import bind
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    module = parse(Path(args.step).read_text(), args.step)
    ops = distinct_ops(module, tuple(args.opcodes))
    sized = []
    for key, (count, text, opcode) in ops.items():
        if args.match and not any(m in key for m in args.match):
            continue
        one = parse(text, "one_op")
        size = sum(p.shape.num_elements for p in one.entry_computation.parameters if not p.shape.is_tuple)
        sized.append((size, key, count, text, opcode, one))
    sized.sort(key=lambda r: -r[0])
    by_op: dict = {}
    for r in sized:                         # the largest of each opcode first, then the next ones
        by_op.setdefault(r[4], []).append(r)
    pick = []
    while len(pick) < args.limit and any(by_op.values()):
        for op in list(by_op):
            if by_op[op] and len(pick) < args.limit:
                pick.append(by_op[op].pop(0))
    rows = []
    rng = np.random.default_rng(0)
    for _, key, count, text, opcode, one in pick:
        base = _random_inputs(one)
        exe = XlaExecutable(text)
        for kind in ("finite", "nan", "mixed"):
            vals = _variant(base, kind, rng)
            xs, _, _ = _best(_xla_execute_only(exe, vals), args.repeat, 20)
            bound = bind(one.entry_computation.parameters, vals)
            hs, _, _ = _best(lambda: run_module(one, bound, RunOptions()), args.repeat, 60)
            rows.append({"what": "op", "opcode": opcode, "key": key[:300], "count": count, "inputs": kind,
                         "xla_s": xs, "hlo_s": hs, "ratio": hs / xs})
            print(f"  {opcode:20s} {kind:7s} xla {xs * 1e3:9.2f} ms  hlo {hs * 1e3:9.2f} ms  "
                  f"ratio {hs / xs:6.2f}  {key[:110]}", file=sys.stderr, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--step", required=True)
    ap.add_argument("--inputs")
    ap.add_argument("--finite-inputs", action="store_true")
    ap.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--per-op", action="store_true")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--opcodes", nargs="+", default=["convolution", "reduce-window", "batch-norm-training",
                                                      "batch-norm-grad", "dot"])
    ap.add_argument("--match", nargs="+", help="only ops whose text holds one of these strings")
    ap.add_argument("--child", choices=["xla", "hlo", "per-op"])
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child == "per-op":
        print(json.dumps(per_op_child(args)))
        return
    if args.child:
        print(json.dumps(child(args.child, args.step, args.inputs, args.finite_inputs, args.repeat, args.out)))
        return
    if args.per_op:
        rows = []
        for cores in args.cores:
            cmd = ["taskset", "-c", ",".join(str(c) for c in range(cores)), sys.executable, __file__,
                   "--child", "per-op", "--step", args.step, "--repeat", str(args.repeat), "--limit", str(args.limit),
                   "--opcodes", *args.opcodes] + (["--match", *args.match] if args.match else [])
            p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
            if p.returncode:
                raise SystemExit("per-op child failed")
            for r in json.loads(p.stdout.strip().splitlines()[-1]):
                r["cores"] = cores
                rows.append(r)
    else:
        rows = step_rows(args)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "nonfinite.json"
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    old["rows"].extend(rows)
    path.write_text(json.dumps(old, indent=1) + "\n")


if __name__ == "__main__":
    main()
