"""Execution speed and peak memory: `hlo run` against XLA CPU, same text, same inputs, one run.

For each module (a transformer training step, 24 narrow layers and 8 layers of width 512, before
and after XLA's optimizations, and a 2000-step scan), in separate child processes so that peak
memory is each side's own:

- XLA: parse + compile (JAX's XLA CPU client), then execute (best of --repeat), peak RSS;
- hlo: `hlo run` end to end (start-up, parse, execute, write results), the execution alone
  (in-process, parse excluded, best of --repeat), peak RSS; its results are compared with XLA's
  (max diff: the largest |hlo - XLA| / (1 + |XLA|) over all outputs);
- hlo with its loops compiled to native code (numba installed; HLO_NATIVE=1: every loop it can
  take, hlo_cli/interpreter/native.py): the execution alone (in-process, steady state: best of
  --repeat after a first run that compiles), `hlo run` end to end with an empty cache (numba
  compiles) and again with that cache (numba loads), and end to end with HLO_NATIVE unset (the
  default policy, which takes a loop only when its iterations left pay for numba), same cache;
  its results must be bit-equal to hlo's without it.

    python benchmarks/bench_run.py [--repeat 3] [--only transformer.hlo ...]

Prints a Markdown table and writes benchmarks/results/run.json.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
# (text hlo runs, text XLA compiles, inputs).  XLA cannot take an after-optimization text back in
# through this route (its bitcasts and layouts do not survive the StableHLO import), so for those
# XLA compiles the before-optimization text, whose optimized form that text is.
CASES = [("transformer.hlo", "transformer.hlo", "transformer.inputs.npz"),
         ("transformer.opt.hlo", "transformer.hlo", "transformer.inputs.npz"),
         ("transformer_512.hlo", "transformer_512.hlo", "transformer_512.inputs.npz"),
         ("transformer_512.opt.hlo", "transformer_512.hlo", "transformer_512.inputs.npz"),
         ("scan2000.hlo", "scan2000.hlo", "scan2000.inputs.npz"),
         ("scan2000.opt.hlo", "scan2000.hlo", "scan2000.inputs.npz")]


def _inputs(path):
    import numpy as np
    with np.load(path) as z:
        return [z[f"arg{k}"] for k in range(len(z.files))]


def child_xla(hlo, inputs, repeat, out):
    import numpy as np
    sys.path.insert(0, str(HERE.parent))
    from hlo_cli.tools.xla_reference import XlaExecutable
    args = _inputs(inputs)
    text = Path(hlo).read_text()
    t0 = time.perf_counter()
    exe = XlaExecutable(text)
    t1 = time.perf_counter()
    results = exe(args)                         # first run (includes any lazy set-up)
    best = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        results = exe(args)
        best = min(best, time.perf_counter() - s)
    np.savez(out, **{f"out{k}": r for k, r in enumerate(results)})
    return {"parse_compile_s": t1 - t0, "parse_s": exe.timings["parse"], "compile_s": exe.timings["compile"],
            "execute_s": best, "first_execute_s": None}


def child_hlo(hlo, inputs, repeat, out):
    sys.path.insert(0, str(HERE.parent))
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.interpreter.inputs import bind
    from hlo_cli.parser import parse
    module = parse(Path(hlo).read_text(), str(hlo))
    args = bind(module.entry_computation.parameters, _inputs(inputs))
    if os.environ.get("HLO_NATIVE") == "1":
        run_module(module, args, RunOptions())      # (the first run compiles the loops)
    best = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        result = run_module(module, args, RunOptions())
        best = min(best, time.perf_counter() - s)
    import numpy as np
    from hlo_cli.interpreter.values import leaves
    np.savez(out, *[np.asarray(v) for v in (leaves(result) if isinstance(result, tuple) else [result])])
    return {"execute_s": best}


def _child(kind, hlo, inputs, repeat, env=None):
    """Run one measurement in a fresh process; returns its JSON (with the child's own peak RSS in MB)."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, __file__, "--child", kind, str(hlo), str(inputs), str(repeat), out]
    p = subprocess.run(cmd, capture_output=True, text=True, env=None if env is None else {**os.environ, **env})
    if p.returncode != 0:
        raise SystemExit(f"{kind} on {hlo} failed:\n{p.stderr[-3000:]}")
    data = json.loads(Path(out).read_text())
    os.unlink(out)
    data["results_npz"] = out + ".npz"           # XLA's results (the hlo child writes none)
    return data


def _hlo_cli_end_to_end(hlo, inputs, out_npz, env=None):
    exe = shutil.which("hlo")
    cmd = ([exe] if exe else [sys.executable, "-c", "from hlo_cli.cli import main; main()"]) + \
        ["run", str(hlo), "--inputs", str(inputs), "--output", out_npz, "--force", "--no-cache", "--format", "json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=None if env is None else {**os.environ, **env})
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"hlo run {hlo} failed:\n{p.stderr[-3000:]}")
    return dt


def _compare(a_npz, b_npz):
    import numpy as np
    worst = 0.0
    with np.load(a_npz) as a, np.load(b_npz) as b:
        for k in a.files:
            x, y = a[k].astype(np.float64), b[k].astype(np.float64)
            d = np.abs(x - y) / (1 + np.abs(y))
            if d.size:
                worst = max(worst, float(np.nanmax(d)))
    return worst


def _have_numba() -> bool:
    import importlib.util
    return importlib.util.find_spec("numba") is not None


def _native_row(hlo, inputs, repeat, ours, xla, tmp):
    """The native loop's figures (see the module docstring), in a cache directory of their own."""
    cache = tempfile.mkdtemp(prefix="hlo-bench-native-", dir=tmp)
    forced = {"HLO_NATIVE": "1", "HLO_CACHE_DIR": cache}
    out_npz = os.path.join(tmp, "native.npz")
    cold = _hlo_cli_end_to_end(hlo, inputs, out_npz, forced)
    cached = _hlo_cli_end_to_end(hlo, inputs, out_npz, forced)
    default = _hlo_cli_end_to_end(hlo, inputs, out_npz, {"HLO_NATIVE": "", "HLO_CACHE_DIR": cache})
    nat = _child("hlo", hlo, inputs, repeat, forced)
    same = _same_bits(nat["results_npz"], ours["results_npz"])
    os.unlink(nat["results_npz"])
    return {"native_execute_s": nat["execute_s"], "native_execute_ratio": nat["execute_s"] / xla["execute_s"],
            "native_e2e_cold_s": cold, "native_e2e_cached_s": cached, "native_default_e2e_s": default,
            "native_same_bits": same}


def _same_bits(a_npz, b_npz) -> bool:
    import numpy as np
    with np.load(a_npz) as a, np.load(b_npz) as b:
        return a.files == b.files and all(a[k].tobytes() == b[k].tobytes() for k in a.files)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=str(HERE / "results" / "run.json"))
    ap.add_argument("--child", nargs=5, metavar=("KIND", "HLO", "INPUTS", "REPEAT", "OUT"))
    ap.add_argument("--native", action=argparse.BooleanOptionalAction, default=_have_numba(),
                    help="also measure the loops compiled with numba (default: when numba is installed)")
    args = ap.parse_args()
    if args.child:
        kind, hlo, inputs, repeat, out = args.child
        res_npz = out + ".npz"
        data = (child_xla if kind == "xla" else child_hlo)(hlo, inputs, int(repeat), res_npz)
        data["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # this process only
        Path(out).write_text(json.dumps(data))
        return
    if not all((DATA / f"{m}.opt.hlo").exists() for m in ("transformer", "transformer_512", "scan2000")):
        subprocess.run([sys.executable, str(HERE / "gen_transformer.py"), "--out", str(DATA)], check=True)
    rows = []
    tmp = tempfile.mkdtemp(prefix="hlo-bench-run-")
    try:
        for hlo_name, xla_name, inp_name in CASES:
            if args.only and hlo_name not in args.only:
                continue
            hlo, inputs = DATA / hlo_name, DATA / inp_name
            xla = _child("xla", DATA / xla_name, inputs, args.repeat)
            ours = _child("hlo", hlo, inputs, args.repeat)
            out_npz = os.path.join(tmp, "ours.npz")
            e2e = _hlo_cli_end_to_end(hlo, inputs, out_npz)
            worst = _compare(out_npz, xla["results_npz"])
            os.unlink(xla["results_npz"])
            xla_total = xla["parse_compile_s"] + xla["execute_s"]
            row = {"module": hlo_name, "xla_compiled": xla_name, "xla_parse_compile_s": xla["parse_compile_s"], "xla_execute_s": xla["execute_s"],
                   "xla_peak_mb": xla["peak_rss_mb"], "hlo_execute_s": ours["execute_s"], "hlo_run_e2e_s": e2e,
                   "hlo_peak_mb": ours["peak_rss_mb"], "execute_ratio": ours["execute_s"] / xla["execute_s"],
                   "e2e_vs_xla_total": e2e / xla_total, "memory_ratio": ours["peak_rss_mb"] / xla["peak_rss_mb"],
                   "max_diff_vs_xla": worst}
            if args.native:
                row.update(_native_row(hlo, inputs, args.repeat, ours, xla, tmp))
            os.unlink(ours["results_npz"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import jax
    meta = {"cpus": os.cpu_count(), "jax": jax.__version__, "repeat": args.repeat}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print("| module | XLA parse+compile | XLA execute | hlo execute | ratio | hlo run (end to end) | vs XLA total "
          "| peak MB hlo / XLA | max diff |")
    print("| --- | --: | --: | --: | --: | --: | --: | --: | --: |")
    for r in rows:
        print(f"| {r['module']} | {r['xla_parse_compile_s']:.2f} s | {r['xla_execute_s'] * 1e3:.1f} ms "
              f"| {r['hlo_execute_s'] * 1e3:.1f} ms | {r['execute_ratio']:.2f}x | {r['hlo_run_e2e_s']:.2f} s "
              f"| {r['e2e_vs_xla_total']:.2f}x | {r['hlo_peak_mb']:.0f} / {r['xla_peak_mb']:.0f} "
              f"({r['memory_ratio']:.2f}x) | {r['max_diff_vs_xla']:.1e} |")
    native = [r for r in rows if "native_execute_s" in r]
    if native:
        print()
        print("| module | XLA execute | hlo native execute | ratio | XLA parse+compile+execute | hlo run native, "
              "empty cache | cached | default policy, cached | bits as without |")
        print("| --- | --: | --: | --: | --: | --: | --: | --: | --- |")
        for r in native:
            print(f"| {r['module']} | {r['xla_execute_s'] * 1e3:.1f} ms | {r['native_execute_s'] * 1e3:.1f} ms "
                  f"| {r['native_execute_ratio']:.2f}x | {r['xla_parse_compile_s'] + r['xla_execute_s']:.2f} s "
                  f"| {r['native_e2e_cold_s']:.2f} s | {r['native_e2e_cached_s']:.2f} s "
                  f"| {r['native_default_e2e_s']:.2f} s | {'yes' if r['native_same_bits'] else 'NO'} |")


if __name__ == "__main__":
    main()
