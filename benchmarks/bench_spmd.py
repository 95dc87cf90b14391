"""Multi-device speed and memory: hlo's simulated devices against XLA CPU on 8 host devices.

The program is one training step of a transformer sharded over a 2 x 4 ("data", "model") mesh
(benchmarks/gen_spmd_transformer.py writes it, with its inputs and XLA's results, into
benchmarks/data).  Same program, same inputs, each measurement in its own child process so that
peak memory is each side's own, times best of --repeat (compilation and parsing excluded):

- ``xla8``: XLA CPU executing the compiled (partitioned) program on 8 host devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=8``); the child lowers the generator's jitted
  step again and checks that its text is the saved ``spmd_transformer.hlo``;
- ``xla1``: XLA CPU running the unpartitioned module on one device (for scale; its time includes
  moving the inputs to the device and the results back, as bench_run.py's does);
- ``hlo8``: hlo running the partitioned module ``spmd_transformer.opt.hlo`` on 8 simulated devices
  (``hlo_cli.devices.run_devices``), inputs split from the global arrays by the parameters'
  shardings (``hlo_cli.devices.inputs.distribute``; checked against XLA's own per-device buffers);
- ``hlo1``: hlo running the unpartitioned module ``spmd_transformer.hlo`` on one device -- the same
  arithmetic as 8 x one device's share, i.e. about what running the devices one after another
  would cost; ``hlo1opt``: the same on ``spmd_transformer.1dev.opt.hlo``, XLA's one-device
  optimization of that module (fused like the partitioned text);
- ``cli``: ``hlo run spmd_transformer.opt.hlo --inputs ... --output ...`` end to end (start-up,
  parse, execute, write).

Peak memory: the child's peak RSS, and the peak of the live values: for hlo the inputs as held
(a replicated input once) plus the peak of one run (``tracemalloc``, a separate untimed run; NumPy
reports its buffers to it), for XLA its per-device buffers (memory analysis: arguments + outputs +
temporaries) summed over the devices.  Results: hlo's per-device
outputs against XLA's (largest |hlo - XLA| and |hlo - XLA| / (1 + |XLA|) over every output and device).

    python benchmarks/bench_spmd.py [--repeat 3] [--only xla8 hlo8 ...]

    python benchmarks/bench_spmd.py --name spmd_transformer_fsdp   # weights split over "data" too

Prints a Markdown table and writes benchmarks/results/spmd_<date>.json (spmd_fsdp_<date>.json).
"""
from __future__ import annotations

import argparse
import datetime
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
NAME = os.environ.get("HLO_BENCH_SPMD_NAME", "spmd_transformer")   # --name sets it for the children too
KINDS = ("xla8", "xla1", "hlo8", "hlo1", "hlo1opt", "cli")
N_DEVICES = 8


def _path(suffix):
    return DATA / f"{NAME}{suffix}"


def _load(path, prefix):
    import numpy as np
    with np.load(path) as z:
        return [z[f"{prefix}{k}"] for k in range(len(z.files))]


def _best_of(repeat, f):
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _traced_peak(f):
    """Peak bytes NumPy and Python allocate while `f` runs (above what is live when it starts)."""
    import tracemalloc
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        f()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------
# children (one process each)
# --------------------------------------------------------------------------

def child_xla8(repeat, out):
    sys.path.insert(0, str(HERE))
    import gen_spmd_transformer as gen          # sets XLA_FLAGS before jax is imported
    import jax
    import numpy as np
    meta = json.loads(_path(".json").read_text())
    mesh = gen.make_mesh()
    jitted, args, shardings = gen.build(mesh, **meta["config"])
    lowered = jitted.lower(*args)
    same_text = lowered.as_text("hlo") == _path(".hlo").read_text()
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    dargs = gen.device_args(args, shardings)
    jax.block_until_ready(compiled(*dargs))     # first run (lazy set-up)
    best, res = _best_of(repeat, lambda: jax.block_until_ready(compiled(*dargs)))
    np.savez(out, **{f"out{k}": gen.per_device(x, mesh) for k, x in enumerate(jax.tree.leaves(res))})
    return {"execute_s": best, "compile_s": compile_s, "text_matches_saved": same_text,
            "devices": N_DEVICES, "live_peak_mb": N_DEVICES * _buffer_bytes(compiled.memory_analysis()) / 1e6}


def _buffer_bytes(mem):
    """One device's buffers by XLA's memory analysis: arguments + outputs + temporaries - aliased."""
    return sum(int(getattr(mem, k)) for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                              "temp_size_in_bytes")) - int(mem.alias_size_in_bytes)


def child_xla1(repeat, out):
    import numpy as np
    sys.path.insert(0, str(HERE.parent))
    from hlo_cli.tools.xla_reference import XlaExecutable
    args = _load(_path(".inputs.npz"), "arg")
    exe = XlaExecutable(_path(".hlo").read_text())
    exe(args)
    best, res = _best_of(repeat, lambda: exe(args))
    np.savez(out, **{f"out{k}": r for k, r in enumerate(res)})
    return {"execute_s": best, "compile_s": exe.timings["compile"], "devices": 1,
            "live_peak_mb": _buffer_bytes(exe.executable.get_compiled_memory_stats()) / 1e6}


def _device_args(module, grid):
    """The entry arguments as DeviceValues: split by `distribute` when it exists, else from XLA's buffers."""
    import numpy as np
    from hlo_cli.devices.values import Stacked, Uniform
    per_dev = _load(_path(".inputs_per_device.npz"), "arg")
    try:
        from hlo_cli.devices.inputs import distribute
    except ImportError:
        distribute = None
    if distribute is not None:
        args = distribute(module, _load(_path(".inputs.npz"), "arg"), grid, False)
        mismatches = [k for k, (a, x) in enumerate(zip(args, per_dev, strict=True))
                      if not np.array_equal(np.asarray(a.stacked(grid.count)), x)]
        return args, "distribute", mismatches
    args = [Uniform(x[0]) if all(np.array_equal(x[0], x[d]) for d in range(1, len(x))) else Stacked(x)
            for x in per_dev]
    return args, "XLA's per-device buffers", []


def _leaves_per_device(value, n):
    """Every array leaf of a DeviceValue as an [n, ...] stack."""
    import numpy as np
    from hlo_cli.devices.values import leaves
    return [np.asarray(a) for a in leaves(value.stacked(n))]


def child_hlo8(repeat, out):
    import numpy as np
    sys.path.insert(0, str(HERE.parent))
    from hlo_cli.topology import grid_of
    from hlo_cli.devices import run_devices
    from hlo_cli.interpreter import RunOptions
    from hlo_cli.parser import parse
    module = parse(_path(".opt.hlo").read_text(), str(_path(".opt.hlo")))
    grid = grid_of(module)
    args, how, mismatches = _device_args(module, grid)
    in_mb = sum(a.nbytes for v in args for a in _leaves_per_device(v, 1)) / 1e6  # as held (Uniform once)

    def run():
        return run_devices(module, args, grid, RunOptions())
    best, res = _best_of(repeat, run)
    peak = _traced_peak(run)
    np.savez(out, **{f"out{k}": a for k, a in enumerate(_leaves_per_device(res.value, grid.count))})
    return {"execute_s": best, "devices": grid.count, "grid": [grid.replicas, grid.partitions],
            "result_devices": list(res.devices), "inputs_from": how, "inputs_differing_from_xla": mismatches,
            "inputs_held_mb": in_mb, "run_peak_mb": peak / 1e6, "live_peak_mb": in_mb + peak / 1e6}


def child_hlo1(repeat, out, suffix=".hlo"):
    import numpy as np
    sys.path.insert(0, str(HERE.parent))
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.interpreter.inputs import bind
    from hlo_cli.parser import parse
    module = parse(_path(suffix).read_text(), str(_path(suffix)))
    args = bind(module.entry_computation.parameters, _load(_path(".inputs.npz"), "arg"))

    def run():
        return run_module(module, args, RunOptions())
    best, res = _best_of(repeat, run)
    peak = _traced_peak(run)
    from hlo_cli.devices.values import leaves
    np.savez(out, **{f"out{k}": np.asarray(a) for k, a in enumerate(leaves(res))})
    in_mb = sum(a.nbytes for a in leaves(tuple(args))) / 1e6
    return {"execute_s": best, "devices": 1, "inputs_held_mb": in_mb, "run_peak_mb": peak / 1e6,
            "live_peak_mb": in_mb + peak / 1e6}


def child_cli(repeat, out):
    """`hlo run` once, end to end, in a process of its own (its peak RSS: this child's only child)."""
    exe = shutil.which("hlo")
    cmd = ([exe] if exe else [sys.executable, "-c", "from hlo_cli.cli import main; main()"]) + \
        ["run", str(_path(".opt.hlo")), "--inputs", str(_path(".inputs.npz")), "--output", out,
         "--force", "--no-cache", "--format", "json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"hlo run: exit {p.returncode}: {(p.stderr or p.stdout).strip()[-600:]}")
    try:
        timings = json.loads(p.stdout).get("timings", {})
    except ValueError:
        timings = {}
    return {"end_to_end_s": dt, "devices": N_DEVICES, "cli_timings": timings,
            "cli_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


CHILDREN = {"xla8": child_xla8, "xla1": child_xla1, "hlo8": child_hlo8, "hlo1": child_hlo1,
            "hlo1opt": lambda repeat, out: child_hlo1(repeat, out, ".1dev.opt.hlo"), "cli": child_cli}


def _child(kind, repeat, tmp):
    """One measurement in a fresh process: its JSON (with its own peak RSS) or {'error': ...}."""
    res_json, res_npz = os.path.join(tmp, f"{kind}.json"), os.path.join(tmp, f"{kind}.npz")
    cmd = [sys.executable, __file__, "--child", kind, str(repeat), res_json]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = [s for s in p.stderr.strip().splitlines() if s.strip()]
        return {"error": lines[-1] if lines else f"exit {p.returncode}", "stderr_tail": p.stderr[-3000:]}
    data = json.loads(Path(res_json).read_text())
    data["results_npz"] = res_npz
    return data


# --------------------------------------------------------------------------
# comparison and report
# --------------------------------------------------------------------------

def _diffs(ours_npz, ref_npz):
    """(max |a - b|, max |a - b| / (1 + |b|)) over all outputs, or None if the structures differ."""
    import numpy as np
    worst_abs = worst_rel = 0.0
    with np.load(ours_npz) as a, np.load(ref_npz) as b:
        if sorted(a.files) != sorted(b.files):
            return None
        for k in b.files:
            x, y = a[k].astype(np.float64), b[k].astype(np.float64)
            if x.shape != y.shape:
                return None
            if y.size:
                d = np.abs(x - y)
                worst_abs = max(worst_abs, float(np.nanmax(d)))
                worst_rel = max(worst_rel, float(np.nanmax(d / (1 + np.abs(y)))))
    return worst_abs, worst_rel


def _fmt_s(s):
    return "n/a" if s is None else (f"{s * 1e3:.0f} ms" if s < 10 else f"{s:.1f} s")


def main():
    global NAME
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=KINDS)
    ap.add_argument("--name", default=NAME, help="the generated program (spmd_transformer, spmd_transformer_fsdp)")
    ap.add_argument("--out", help="default benchmarks/results/spmd_<date>.json (spmd_fsdp_<date>.json for the fsdp program)")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "REPEAT", "OUT"))
    args = ap.parse_args()
    NAME = args.name
    os.environ["HLO_BENCH_SPMD_NAME"] = NAME
    fsdp = NAME.endswith("_fsdp")
    if args.out is None:
        args.out = str(HERE / "results" / f"spmd{'_fsdp' if fsdp else ''}_{datetime.date.today().isoformat()}.json")
    if args.child:
        kind, repeat, out = args.child
        data = CHILDREN[kind](int(repeat), out[: -len(".json")] + ".npz")
        data["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # this process only
        Path(out).write_text(json.dumps(data))
        return
    if not all(_path(s).exists() for s in (".hlo", ".opt.hlo", ".1dev.opt.hlo", ".json", ".inputs.npz",
                                           ".inputs_per_device.npz", ".expected.npz", ".expected_per_device.npz")):
        subprocess.run([sys.executable, str(HERE / "gen_spmd_transformer.py"), "--out", str(DATA), "--name", NAME]
                       + (["--fsdp"] if fsdp else []), check=True)
    kinds = args.only or list(KINDS)
    load_before = os.getloadavg()
    rows = {}
    tmp = tempfile.mkdtemp(prefix="hlo-bench-spmd-")
    try:
        for kind in kinds:
            rows[kind] = r = _child(kind, args.repeat, tmp)
            if "cli_peak_rss_mb" in r:
                r["peak_rss_mb"] = r.pop("cli_peak_rss_mb")     # hlo's process, not the child around it
            if "results_npz" in r:
                per_device = kind not in ("xla1", "hlo1", "hlo1opt")
                ref = _path(".expected_per_device.npz" if per_device else ".expected.npz")
                d = _diffs(r["results_npz"], ref)
                if kind == "cli" and d is None:      # the CLI may write global arrays
                    d = _diffs(r["results_npz"], _path(".expected.npz"))
                r["max_abs_diff_vs_xla"], r["max_rel_diff_vs_xla"] = d if d else (None, None)
                if d is None:
                    r["diff_note"] = "output structure differs from XLA's"
                del r["results_npz"]
            print(json.dumps({kind: r}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    import numpy as np
    meta = json.loads(_path(".json").read_text())
    xla8 = rows.get("xla8", {}).get("execute_s")
    hlo8 = rows.get("hlo8", {}).get("execute_s")
    summary = {"hlo8_vs_xla8": hlo8 / xla8 if hlo8 and xla8 else None}
    for k in ("xla1", "hlo1", "hlo1opt"):
        t = rows.get(k, {}).get("execute_s")
        summary[f"hlo8_vs_{k}"] = hlo8 / t if hlo8 and t else None
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(), "load_avg_1m_before_after": [load_before[0], os.getloadavg()[0]],
            "numpy": np.__version__, "jax": meta["jax"], "repeat": args.repeat,
            "program": {k: meta[k] for k in ("mesh", "config", "inputs", "outputs", "collectives")},
            "command": "python benchmarks/bench_spmd.py " + " ".join(sys.argv[1:])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": info, "rows": rows, "summary": summary}, indent=2) + "\n")

    labels = {"xla8": "XLA CPU, partitioned, 8 host devices", "xla1": "XLA CPU, unpartitioned, 1 device",
              "hlo8": "hlo, partitioned, 8 simulated devices", "hlo1": "hlo, unpartitioned, 1 device",
              "hlo1opt": "hlo, unpartitioned, XLA-optimized for 1 device",
              "cli": "`hlo run` partitioned, end to end"}
    print(f"\n{NAME}: mesh {meta['mesh']}, {meta['config']}, best of {args.repeat}, "
          f"{os.cpu_count()} CPUs, load average {info['load_avg_1m_before_after'][0]:.1f} before / "
          f"{info['load_avg_1m_before_after'][1]:.1f} after\n")
    print("| run | time | vs XLA 8 devices | peak RSS | live values | max abs diff | max rel diff |")
    print("| --- | --: | --: | --: | --: | --: | --: |")
    for kind in kinds:
        r = rows[kind]
        if "error" in r:
            print(f"| {labels[kind]} | failed: {r['error'][:150]} | | | | | |")
            continue
        t = r.get("execute_s")
        peak = r.get("live_peak_mb")
        if t is None:                        # the CLI: end to end, and the execution it reports
            t = r.get("cli_timings", {}).get("execute_s")
            shown = f"{_fmt_s(r['end_to_end_s'])} (execute {_fmt_s(t)})"
        else:
            shown = _fmt_s(t)
        print(f"| {labels[kind]} | {shown} | {t / xla8:.2f}x |" if xla8 and t else f"| {labels[kind]} | {shown} | |",
              f"{r['peak_rss_mb']:.0f} MB |" if "peak_rss_mb" in r else " |",
              f"{peak:.0f} MB |" if peak else " |",
              "n/a |" if r.get("max_abs_diff_vs_xla") is None else f"{r['max_abs_diff_vs_xla']:.1e} |",
              "n/a |" if r.get("max_rel_diff_vs_xla") is None else f"{r['max_rel_diff_vs_xla']:.1e} |")
    for k, what in (("hlo1", "the global program before optimization"), ("hlo1opt", "XLA's one-device optimization of it")):
        if summary[f"hlo8_vs_{k}"]:
            print(f"hlo on 8 devices / hlo on 1 device running {what}: {summary[f'hlo8_vs_{k}']:.2f}x")
    print("(live values: for hlo the inputs as held plus the tracemalloc peak of one run; for XLA "
          "its buffers -- arguments + outputs + temporaries -- summed over its devices)")


if __name__ == "__main__":
    main()
