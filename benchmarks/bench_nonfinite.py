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
of the step (--opcodes chooses: reduce, clamp, multiply... too), as one-instruction modules
(bench_convnet.one_op_module) on three inputs: finite (uniform [0.5, 1.5)), "nan" (the first float
operand all NaN) and "mixed" (1% each of NaN, +inf and -inf in every float operand).  --synthetic
adds (or, without --step, measures alone) the ops a MobileNetV2 step lacks, at its scale: ResNet's
max pool (reduce-window) and its gradient (select-and-scatter), an average pool, reduces, and a chain
of elementwise ops (add, multiply, maximum, compare, select, exponential) that the compiler runs
as one generated kernel (--match picks among them by name).

    python benchmarks/bench_nonfinite.py --step /tmp/mobilenet_v2.hlo [--finite-inputs] [--cores 1 2]
    python benchmarks/bench_nonfinite.py --step /tmp/mobilenet_v2.hlo --per-op --limit 8
        [--opcodes convolution] [--match 'size=3x3' ...]
    python benchmarks/bench_nonfinite.py --per-op --synthetic [--match maxpool ...] --cores 2

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
    first = next((k for k, a in enumerate(args) if np.asarray(a).dtype.kind == "f" and np.ndim(a)), None)
    for k, a in enumerate(args):
        a = np.array(a)
        if a.dtype.kind == "f" and a.ndim:
            if kind == "nan" and k == first:
                a[...] = np.nan
            elif kind == "mixed":
                for val in (np.nan, np.inf, -np.inf):
                    a[rng.random(a.shape) < 0.01] = val
        out.append(a)
    return out


_ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n\n"
_MAX = "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(a, b)\n}\n\n"
_GE = ("ge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
       "  ROOT r = pred[] compare(a, b), direction=GE\n}\n\n")
_POOL_IN, _POOL_OUT = "f32[32,64,112,112]", "f32[32,64,56,56]"
_EW = "f32[32,32,112,112]"
# name: (opcode, HLO text); the ops of a training step that MobileNetV2's lacks, at its scale
SYNTHETIC = {
    "maxpool": ("reduce-window", "HloModule maxpool\n\n" + _MAX + "ENTRY e {\n"
                f"  p0 = {_POOL_IN} parameter(0)\n  c = f32[] constant(-inf)\n"
                f"  ROOT r = {_POOL_OUT} reduce-window(p0, c), window={{size=1x1x3x3 stride=1x1x2x2 "
                "pad=0_0x0_0x1_1x1_1}, to_apply=max\n}\n"),
    "avgpool": ("reduce-window", "HloModule avgpool\n\n" + _ADD + "ENTRY e {\n"
                "  p0 = f32[96,1280,7,7] parameter(0)\n  c = f32[] constant(0)\n"
                "  ROOT r = f32[96,1280,1,1] reduce-window(p0, c), window={size=1x1x7x7}, to_apply=add\n}\n"),
    "maxpool_grad": ("select-and-scatter", "HloModule maxpool_grad\n\n" + _GE + _ADD + "ENTRY e {\n"
                     f"  p0 = {_POOL_IN} parameter(0)\n  p1 = {_POOL_OUT} parameter(1)\n"
                     f"  c = f32[] constant(0)\n  ROOT r = {_POOL_IN} select-and-scatter(p0, p1, c), "
                     "window={size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}, select=ge, scatter=add\n}\n"),
    "reduce_sum": ("reduce", "HloModule reduce_sum\n\n" + _ADD + "ENTRY e {\n"
                   "  p0 = f32[96,96,112,112] parameter(0)\n  c = f32[] constant(0)\n"
                   "  ROOT r = f32[96] reduce(p0, c), dimensions={0,2,3}, to_apply=add\n}\n"),
    "reduce_max": ("reduce", "HloModule reduce_max\n\n" + _MAX + "ENTRY e {\n"
                   "  p0 = f32[96,1280,7,7] parameter(0)\n  c = f32[] constant(-inf)\n"
                   "  ROOT r = f32[96,1280] reduce(p0, c), dimensions={2,3}, to_apply=max\n}\n"),
    "elementwise": ("elementwise", "HloModule elementwise\n\nENTRY e {\n"
                    f"  p0 = {_EW} parameter(0)\n  p1 = {_EW} parameter(1)\n  p2 = {_EW} parameter(2)\n"
                    f"  a = {_EW} add(p0, p1)\n  m = {_EW} multiply(a, p2)\n  x = {_EW} maximum(m, p1)\n"
                    f"  g = pred[32,32,112,112] compare(x, p2), direction=GT\n  s = {_EW} select(g, x, p0)\n"
                    f"  ROOT r = {_EW} exponential(s)\n}}\n"),
    # a compiled computation, not a region: a loop body of small float arithmetic run 1000 times
    "while_chain": ("while", "HloModule while_chain\n\nbody {\n"
                    "  p = (s32[], f32[1000], f32[1000]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
                    "  x = f32[1000] get-tuple-element(p), index=1\n  y = f32[1000] get-tuple-element(p), index=2\n"
                    "  one = s32[] constant(1)\n  j = s32[] add(i, one)\n  a = f32[1000] multiply(x, y)\n"
                    "  b = f32[1000] subtract(a, a)\n  c = f32[1000] divide(b, y)\n  d = f32[1000] add(c, x)\n"
                    "  ROOT t = (s32[], f32[1000], f32[1000]) tuple(j, d, y)\n}\n\ncond {\n"
                    "  p = (s32[], f32[1000], f32[1000]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
                    "  n = s32[] constant(1000)\n  ROOT l = pred[] compare(i, n), direction=LT\n}\n\n"
                    "ENTRY e {\n  x = f32[1000] parameter(0)\n  y = f32[1000] parameter(1)\n  z = s32[] constant(0)\n"
                    "  t = (s32[], f32[1000], f32[1000]) tuple(z, x, y)\n"
                    "  ROOT w = (s32[], f32[1000], f32[1000]) while(t), condition=cond, body=body\n}\n"),
}


def _picks(module, args):
    """(size, key, count, text, opcode, parsed module) of the one-op modules to measure."""
    from bench_convnet import distinct_ops
    from hlo_cli.parser import parse
    sized = []
    if module is not None:
        for key, (count, text, opcode) in distinct_ops(module, tuple(args.opcodes)).items():
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
    if args.synthetic:
        pick += [(0, name, 1, text, opcode, parse(text, name)) for name, (opcode, text) in SYNTHETIC.items()
                 if not args.match or any(m in name for m in args.match)]
    return pick


def per_op_child(args):
    import numpy as np
    from bench_convnet import _best, _random_inputs, _xla_execute_only
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.interpreter.inputs import bind
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    module = parse(Path(args.step).read_text(), args.step) if args.step else None
    rows = []
    rng = np.random.default_rng(0)
    for _, key, count, text, opcode, one in _picks(module, args):
        base = _random_inputs(one)
        exe = XlaExecutable(text)
        for kind in ("finite", "nan", "mixed"):
            vals = _variant(base, kind, rng)
            xs, _, _ = _best(_xla_execute_only(exe, vals), args.repeat, 20)
            bound = bind(one.entry_computation.parameters, vals)
            hs, _, _ = _best(lambda: run_module(one, bound, RunOptions()), args.repeat, 60)
            rows.append({"what": "op", "opcode": opcode, "key": key[:300], "count": count, "inputs": kind,
                         "xla_s": xs, "hlo_s": hs, "ratio": hs / xs,
                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                         "load_average": list(os.getloadavg())})
            print(f"  {opcode:20s} {kind:7s} xla {xs * 1e3:9.2f} ms  hlo {hs * 1e3:9.2f} ms  "
                  f"ratio {hs / xs:6.2f}  {key[:110]}", file=sys.stderr, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--step")
    ap.add_argument("--inputs")
    ap.add_argument("--finite-inputs", action="store_true")
    ap.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--per-op", action="store_true")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--opcodes", nargs="+", default=["convolution", "reduce-window", "batch-norm-training",
                                                      "batch-norm-grad", "dot"])
    ap.add_argument("--match", nargs="+", help="only ops whose text (or synthetic name) holds one of these")
    ap.add_argument("--synthetic", action="store_true", help="also the ops the step lacks (SYNTHETIC)")
    ap.add_argument("--no-save", action="store_true", help="print the rows, do not add them to the results")
    ap.add_argument("--child", choices=["xla", "hlo", "per-op"])
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.inputs and args.finite_inputs:
        ap.error("--inputs and --finite-inputs name two different input sets: give one")
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
                   "--child", "per-op", "--repeat", str(args.repeat), "--limit", str(args.limit),
                   "--opcodes", *args.opcodes] + (["--match", *args.match] if args.match else []) \
                + (["--step", args.step] if args.step else []) + (["--synthetic"] if args.synthetic else [])
            p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
            if p.returncode:
                raise SystemExit("per-op child failed")
            for r in json.loads(p.stdout.strip().splitlines()[-1]):
                r["cores"] = cores
                rows.append(r)
    elif args.step:
        rows = step_rows(args)
    else:
        raise SystemExit("--step is needed, except with --per-op --synthetic")
    if args.no_save:
        return
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "nonfinite.json"
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    old["rows"].extend(rows)
    path.write_text(json.dumps(old, indent=1) + "\n")


if __name__ == "__main__":
    main()
