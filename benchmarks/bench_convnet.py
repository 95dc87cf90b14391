"""Convnet training steps (and an fp8 GEMM loop): `hlo run` against XLA CPU, whole step and per op.

Modules come from benchmarks/gen_convnets.py (MobileNetV2 and ResNet-18 training steps, the fp8
loop; JAX) and benchmarks/gen_torch_convnet.py (MobileNetV2 by PyTorch/XLA, if it was generated).

Whole step, each side in its own child process so that peak memory is its own:
- XLA: parse + compile (JAX's XLA CPU client), execute (best of --repeat), peak RSS;
- hlo: execute in-process (run_module, parse excluded; best of --repeat, one run only when the
  first takes over a minute; killed after --timeout seconds), peak RSS, and the live-set estimate
  of hlo's memory accounting (interpreter.memory.estimate, when the interpreter has it);
  optionally (--e2e) `hlo run` end to end through the CLI;
- max diff: the largest |hlo - XLA| / (1 + |XLA|) over all outputs;
- CPU seconds of each side's execution next to the wall clock: on a machine others load, XLA's
  thread pool waits for descheduled threads and its wall time grows far more than its CPU time
  (measured: MobileNetV2 step 406 s wall at load 15, 144 s wall / 36 s CPU at load 9).
XLA cannot take an after-optimization text back in, so for `*.opt.hlo` XLA's figures are those of
the module it compiles from the before-optimization text.

Per op (--per-op): every distinct convolution (and reduce-window, select-and-scatter,
batch-norm-*, dot) of a module -- key: the instruction's text with its operand shapes, name and
metadata left out -- becomes a one-instruction module (parameters of its operand shapes; scalar
constant operands such as a reduction's initial value stay constants), run on random inputs by XLA
and by hlo (best of --repeat each, an op taking over --op-timeout seconds in hlo is stopped);
ratio = hlo / XLA.  The worst ratios are printed and everything goes to
benchmarks/results/convnet_<module>.json.

    python benchmarks/bench_convnet.py [--repeat 3] [--only mobilenet_v2.hlo ...] [--skip-xla]
        [--per-op | --per-op-only] [--timeout 600] [--op-timeout 120] [--e2e]
    python benchmarks/bench_convnet.py --report      # the tables of benchmarks/results/convnet_*.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from bench_run import _compare, _inputs  # noqa: E402

# (text hlo runs, text XLA compiles, inputs)
MODULES = ("mobilenet_v2", "resnet18", "fp8_loop", "torch_mobilenet_v2")
CASES = [(f"{m}{suffix}", f"{m}.hlo", f"{m}.inputs.npz") for m in MODULES for suffix in (".hlo", ".opt.hlo")]
PER_OP = ("convolution", "reduce-window", "select-and-scatter", "batch-norm-training", "batch-norm-grad",
          "batch-norm-inference", "dot")


def _flatten(value, out):
    if isinstance(value, (tuple, list)):
        for v in value:
            _flatten(v, out)
    else:
        out.append(value)
    return out


def _estimate(module):
    """hlo's own live-set estimate (interpreter.memory.estimate), or None when it has none."""
    from hlo_cli.interpreter import memory
    est = getattr(memory, "estimate", None)
    if est is None:
        return None
    try:
        e = est(module)
    except Exception as exc:  # noqa: BLE001 -- a benchmark records what failed and goes on
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {k: getattr(e, k) for k in ("parameters", "peak_live", "largest", "total") if hasattr(e, k)}


def _typed_inputs(module, inputs):
    """The inputs as the entry parameters' types (narrow floats are stored as raw records)."""
    from hlo_cli.interpreter.inputs import bind
    return bind(module.entry_computation.parameters, _inputs(inputs))


def _save(out, leaves):
    """Results for the comparison: narrow floats widened to f32 (exactly) so that NumPy reads them."""
    import numpy as np
    from hlo_cli.pipeline.io import storable
    arrays = {}
    for i, r in enumerate(leaves):
        a = np.asarray(r)
        if storable(a) is not a:                  # an ml_dtypes array
            a = a.astype(np.float32)
        arrays[f"out{i}"] = a
    np.savez(out, **arrays)


def child_xla(hlo, inputs, repeat, out):
    """bench_run.child_xla, with inputs typed as the parameters (raw records of narrow floats)."""
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    text = Path(hlo).read_text()
    args = _typed_inputs(parse(text, str(hlo)), inputs)
    t0 = time.perf_counter()
    exe = XlaExecutable(text)
    t1 = time.perf_counter()
    results = exe(args)                         # first run (includes any lazy set-up)
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        s, c = time.perf_counter(), _cpu()
        results = exe(args)
        best, best_cpu = min(best, time.perf_counter() - s), min(best_cpu, _cpu() - c)
    _save(out, results)
    return {"parse_compile_s": t1 - t0, "parse_s": exe.timings["parse"], "compile_s": exe.timings["compile"],
            "execute_s": best, "execute_cpu_s": best_cpu}


def _cpu():
    """CPU seconds of this process, all threads (under a loaded machine, a fairer figure than the
    wall clock: XLA's thread pool waits for descheduled threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_hlo(hlo, inputs, repeat, out):
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.parser import parse
    t0 = time.perf_counter()
    module = parse(Path(hlo).read_text(), str(hlo))
    parse_s = time.perf_counter() - t0
    estimate = _estimate(module)
    args = _typed_inputs(module, inputs)
    times, cpu = [], []
    for k in range(repeat):
        s, c = time.perf_counter(), _cpu()
        result = run_module(module, args, RunOptions())
        times.append(time.perf_counter() - s)
        cpu.append(_cpu() - c)
        if k == 0:
            _save(out, _flatten(result, []))
        del result
        if times[0] > 60:
            break
    return {"parse_s": parse_s, "execute_s": min(times), "execute_cpu_s": min(cpu), "runs": len(times),
            "live_estimate": estimate}


def _child(kind, hlo, inputs, repeat, timeout=None):
    """One measurement in a fresh process: its JSON (with the child's own peak RSS in MB), or
    {"timeout": seconds} when it did not finish in time."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, __file__, "--child", kind, str(hlo), str(inputs), str(repeat), out]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.unlink(out)
        return {"timeout": timeout}
    if p.returncode != 0:
        os.unlink(out)
        return {"error": p.stderr[-3000:]}
    data = json.loads(Path(out).read_text())
    os.unlink(out)
    data["results_npz"] = out + ".npz"
    return data


def _e2e(hlo, inputs, timeout):
    import shutil
    exe = shutil.which("hlo")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ([exe] if exe else [sys.executable, "-m", "hlo_cli.cli"]) + \
            ["run", str(hlo), "--inputs", str(inputs), "--output", os.path.join(tmp, "o.npz"), "--force",
             "--no-cache", "--format", "json"]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return time.perf_counter() - t0 if p.returncode == 0 else None


def _compare_expected(ours_npz, expected_npz):
    """bench_run._compare against gen_*'s expected outputs, whose bf16 arrays are raw 2-byte
    records (the only 2-byte ml_dtype; f16 is stored as itself)."""
    import ml_dtypes
    import numpy as np
    worst = 0.0
    with np.load(ours_npz) as a, np.load(expected_npz) as b:
        for k in a.files:
            y = b[k]
            if y.dtype.kind == "V":
                if y.dtype.itemsize != 2:
                    continue
                y = y.view(ml_dtypes.bfloat16)
            x, y = a[k].astype(np.float64), y.astype(np.float64)
            d = np.abs(x - y) / (1 + np.abs(y))
            if d.size:
                worst = max(worst, float(np.nanmax(d)))
    return worst


# ----------------------------------------------------------------------------- per op

def _op_key(inst, comp):
    from hlo_cli.ir.printer import format_instruction
    line = format_instruction(inst, computation=comp, percent=False, operand_shapes=True, metadata=False,
                              backend_config=False)
    return _norm_key(line.split(" = ", 1)[1])


def _norm_key(key):
    """An op's key without its operands' names (instructions alike but for their operands are one)."""
    import re
    return re.sub(r"(\]|\}) [A-Za-z_][\w.\-]*(?=[,)])", r"\1", key)


def _merge(rows):
    """Rows of one op (same key after _norm_key) as one, their counts added (files written before
    the key dropped operand names)."""
    out: dict[str, dict] = {}
    for r in rows:
        k = _norm_key(r["key"])
        if k in out:
            out[k]["count"] += r["count"]
        else:
            out[k] = dict(r, key=k)
    return list(out.values())


def _called(module, names, seen, out):
    from hlo_cli.ir.printer import format_computation
    for n in names:
        if n in seen:
            continue
        seen.add(n)
        c = module.computation_map[n]
        for i in c.instructions:
            _called(module, i.called_computations, seen, out)
        out.append(format_computation(c, percent=False, metadata=False))


def one_op_module(module, comp, inst):
    """HLO text of a module whose entry runs `inst` alone on parameters of its operand shapes."""
    from hlo_cli.ir.printer import format_attribute_value, format_shape, instruction_attribute_order
    body, ops, nparam = [], [], 0
    for k, name in enumerate(inst.operands):
        src = comp.by_name[name]
        if src.opcode == "constant" and not src.shape.is_tuple and src.shape.num_elements == 1:
            from hlo_cli.ir.printer import format_instruction
            body.append("  " + format_instruction(src, percent=False, metadata=False).replace(
                f"{src.name} = ", f"c{k} = ", 1))
            ops.append(f"c{k}")
        else:
            body.append(f"  p{nparam} = {format_shape(src.shape, False)} parameter({nparam})")
            ops.append(f"p{nparam}")
            nparam += 1
    attrs = [f"{a}={format_attribute_value(a, inst.attrs[a])}" for a in instruction_attribute_order(inst)
             if a not in ("metadata", "backend_config", "sharding", "frontend_attributes")]
    body.append(f"  ROOT r = {format_shape(inst.shape, False)} {inst.opcode}({', '.join(ops)})"
                + "".join(", " + a for a in attrs))
    called: list[str] = []
    _called(module, inst.called_computations, set(), called)
    return "HloModule one_op\n\n" + "".join(c + "\n\n" for c in called) + "ENTRY main {\n" + \
        "\n".join(body) + "\n}\n"


def distinct_ops(module, opcodes=PER_OP):
    """{key: (count, text of the one-instruction module, opcode)} over every computation."""
    found: dict[str, list] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode in opcodes:
                key = _op_key(inst, comp)
                if key in found:
                    found[key][0] += 1
                else:
                    found[key] = [1, one_op_module(module, comp, inst), inst.opcode]
    return found


def _random_inputs(module, seed=0):
    import numpy as np
    from hlo_cli.ir.dtypes import ELEMENT_TYPES
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry_computation.parameters:
        et = ELEMENT_TYPES[p.shape.element_type]
        dims = tuple(p.shape.dims)
        if p.shape.element_type == "pred":
            a = rng.random(dims) < 0.5
        elif np.issubdtype(et.numpy, np.integer):
            a = rng.integers(0, 8, size=dims).astype(et.numpy)
        else:  # positive: a batch-norm variance must be
            a = rng.uniform(0.5, 1.5, size=dims).astype(np.float32).astype(et.numpy)
        out.append(a)
    return out


def _xla_execute_only(exe, args):
    """A function running `exe` on inputs already on the device (per op, copying large inputs in
    would be a good part of XLA's time): returns the results as NumPy arrays (no copy on CPU)."""
    import jax
    import numpy as np
    bufs = [jax.device_put(np.asarray(a), exe.device) for a in args]

    def run():
        outs = exe.executable.execute_sharded(bufs).disassemble_into_single_device_arrays()
        return [np.asarray(o[0].block_until_ready()) for o in outs]
    return run


class _Timeout(Exception):
    pass


def _best(f, repeat, budget):
    """(best wall seconds, best CPU seconds, last result) of up to repeat + 1 runs."""
    times, cpu = [], []
    for _ in range(repeat + 1):                 # the first run warms up (and is kept if slow)
        s, c = time.perf_counter(), _cpu()
        r = f()
        times.append(time.perf_counter() - s)
        cpu.append(_cpu() - c)
        if sum(times) > budget:
            break
    k = 1 if len(times) > 1 else 0
    return min(times[k:]), min(cpu[k:]), r


def per_op(module_path, repeat, op_timeout, skip_xla):
    import numpy as np
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable

    def alarm(*_):
        raise _Timeout()

    signal.signal(signal.SIGALRM, alarm)
    module = parse(Path(module_path).read_text(), str(module_path))
    rows = []
    for key, (count, text, opcode) in distinct_ops(module).items():
        one = parse(text, "one_op")
        args = _random_inputs(one)
        row = {"opcode": opcode, "key": key, "count": count}
        if not skip_xla:
            try:
                exe = XlaExecutable(text)
                exe(args)                       # any XLA refusal shows here
                run = _xla_execute_only(exe, args)
                row["xla_s"], row["xla_cpu_s"], want = _best(run, repeat, 20)
            except Exception as e:  # noqa: BLE001
                row["xla_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                want = None
        from hlo_cli.interpreter.inputs import bind
        values = bind(one.entry_computation.parameters, args)
        signal.alarm(int(op_timeout))
        try:
            row["hlo_s"], row["hlo_cpu_s"], got = _best(lambda: run_module(one, values, RunOptions()), repeat,
                                                        op_timeout / 4)
        except _Timeout:
            row["hlo_timeout_s"] = op_timeout
            got = None
        finally:
            signal.alarm(0)
        if got is not None and not skip_xla and want is not None:
            g = _flatten(got, [])
            diffs = [float(np.nanmax(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
                                     / (1 + np.abs(np.asarray(b, np.float64)))))
                     for a, b in zip(g, want, strict=True) if np.size(b)]
            row["max_diff"] = max(diffs) if diffs else 0.0
        if "xla_s" in row:
            hlo_s = row.get("hlo_s", row.get("hlo_timeout_s"))
            row["ratio"] = hlo_s / row["xla_s"]
            if "hlo_timeout_s" in row:
                row["ratio_at_least"] = True
        rows.append(row)
        print(f"  {opcode:20s} x{count:<3d} xla {row.get('xla_s', float('nan')) * 1e3:9.2f} ms  "
              f"hlo {row.get('hlo_s', row.get('hlo_timeout_s', float('nan'))) * 1e3:10.2f} ms"
              f"{'+' if 'hlo_timeout_s' in row else ' '} ratio {row.get('ratio', float('nan')):7.2f}  "
              f"{_short(key, 140)}", flush=True)
    return rows


def _short(key, n=200):
    """The key without layouts and operand names, cut at n characters."""
    import re
    key = re.sub(r"\]\{[0-9,]*\}", "]", key)
    key = _norm_key(key)
    return key if len(key) <= n else key[:n - 3] + "..."


def print_per_op(name, rows, top):
    rows = _merge(rows)
    ranked = sorted((r for r in rows if "ratio" in r), key=lambda r: -r["ratio"])
    xla_total = sum(r["xla_s"] * r["count"] for r in rows if "xla_s" in r)
    hlo_total = sum(r.get("hlo_s", r.get("hlo_timeout_s", 0)) * r["count"] for r in rows)
    print(f"\n### {name}: {len(rows)} distinct ops ({sum(r['count'] for r in rows)} instructions); "
          f"sum over instructions: XLA {xla_total * 1e3:.0f} ms, hlo {hlo_total * 1e3:.0f} ms")
    print("| op | count | XLA ms | hlo ms | ratio | CPU ratio | max diff | instruction |")
    print("| --- | --: | --: | --: | --: | --: | --: | --- |")
    for r in ranked[:top]:
        hlo_ms = r.get("hlo_s", r.get("hlo_timeout_s", 0)) * 1e3
        print(f"| {r['opcode']} | {r['count']} | {r['xla_s'] * 1e3:.2f} | {'>' if r.get('ratio_at_least') else ''}"
              f"{hlo_ms:.1f} | {'>' if r.get('ratio_at_least') else ''}{r['ratio']:.1f}x | "
              f"{(r['hlo_cpu_s'] / r['xla_cpu_s']) if r.get('hlo_cpu_s') and r.get('xla_cpu_s') else float('nan'):.1f}x | "
              f"{r.get('max_diff', float('nan')):.1e} | `{_short(r['key'])}` |")


# ----------------------------------------------------------------------------- driver

def whole_step(hlo_name, xla_name, inp_name, args):
    hlo, inputs = DATA / hlo_name, DATA / inp_name
    row = {"module": hlo_name, "xla_compiled": xla_name}
    xla = None
    if not args.skip_xla:
        xla = _child("xla", DATA / xla_name, inputs, args.repeat)
        if "error" in xla:
            row["xla_error"] = xla["error"][-500:]
            xla = None
        else:
            row.update(xla_parse_compile_s=xla["parse_compile_s"], xla_execute_s=xla["execute_s"],
                       xla_execute_cpu_s=xla.get("execute_cpu_s"), xla_peak_mb=xla["peak_rss_mb"])
    ours = _child("hlo", hlo, inputs, args.repeat, args.timeout)
    if "timeout" in ours:
        row["hlo_timeout_s"] = args.timeout
    elif "error" in ours:
        row["hlo_error"] = ours["error"][-1500:]
    else:
        row.update(hlo_parse_s=ours["parse_s"], hlo_execute_s=ours["execute_s"],
                   hlo_execute_cpu_s=ours.get("execute_cpu_s"), hlo_runs=ours["runs"],
                   hlo_peak_mb=ours["peak_rss_mb"], hlo_live_estimate=ours["live_estimate"])
        if xla is not None:
            row["execute_ratio"] = ours["execute_s"] / xla["execute_s"]
            row["memory_ratio"] = ours["peak_rss_mb"] / xla["peak_rss_mb"]
            row["max_diff_vs_xla"] = _compare(ours["results_npz"], xla["results_npz"])
        expected = DATA / inp_name.replace(".inputs.npz", ".expected.npz")
        if expected.exists():
            row["max_diff_vs_expected"] = _compare_expected(ours["results_npz"], expected)
        os.unlink(ours["results_npz"])
        if args.e2e:
            row["hlo_run_e2e_s"] = _e2e(hlo, inputs, args.timeout)
    if xla is not None:
        os.unlink(xla["results_npz"])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="module files (mobilenet_v2.hlo, resnet18.opt.hlo, ...)")
    ap.add_argument("--suffix", default="", help="module names end with this (gen_convnets.py --suffix)")
    ap.add_argument("--skip-xla", action="store_true", help="hlo only (no XLA runs, no ratios)")
    ap.add_argument("--per-op", action="store_true", help="also every distinct heavy op alone")
    ap.add_argument("--per-op-only", action="store_true", help="only the per-op measurements")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for hlo's whole-step run")
    ap.add_argument("--op-timeout", type=float, default=120, help="seconds for one op in hlo")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--data", default=str(HERE / "data"), help="where the generated modules are")
    ap.add_argument("--results", default=str(HERE / "results"), help="where convnet_<module>.json goes")
    ap.add_argument("--e2e", action="store_true", help="also `hlo run` end to end through the CLI")
    ap.add_argument("--report", action="store_true", help="print the tables of the results files, measure nothing")
    ap.add_argument("--child", nargs=5, metavar=("KIND", "HLO", "INPUTS", "REPEAT", "OUT"))
    args = ap.parse_args()
    import faulthandler
    faulthandler.register(signal.SIGUSR1)       # kill -USR1 PID: where is it?
    if args.child:
        kind, hlo, inputs, repeat, out = args.child
        res_npz = out + ".npz"
        data = (child_xla if kind == "xla" else child_hlo)(hlo, inputs, int(repeat), res_npz)
        data["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        Path(out).write_text(json.dumps(data))
        return
    global DATA, RESULTS
    DATA, RESULTS = Path(args.data), Path(args.results)
    if args.report:
        report(RESULTS, args.top)
        return
    import jax
    commit = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "hlo_cli"],
                           capture_output=True, text=True).stdout.split("\n")
    meta = {"cpus": os.cpu_count(), "jax": jax.__version__, "repeat": args.repeat, "commit": commit,
            "uncommitted_in_hlo_cli": [ln[3:] for ln in dirty if ln.strip()],
            "load_average": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    by_module: dict[str, dict] = {}
    cases = [(f"{m}{args.suffix}{ext}", f"{m}{args.suffix}.hlo", f"{m}{args.suffix}.inputs.npz")
             for m in MODULES for ext in (".hlo", ".opt.hlo")]
    for hlo_name, xla_name, inp_name in cases:
        if args.only and hlo_name not in args.only:
            continue
        if not (DATA / hlo_name).exists():
            print(f"({hlo_name} not generated: skipped)")
            continue
        base = hlo_name.split(".")[0]
        if base not in by_module:               # measurements of other texts or runs are kept
            path = RESULTS / f"convnet_{base}.json"
            by_module[base] = json.loads(path.read_text()) if path.exists() else {"steps": [], "per_op": {}}
        entry = by_module[base]
        if not args.per_op_only:
            row = whole_step(hlo_name, xla_name, inp_name, args)
            row["meta"] = meta
            entry["steps"] = [r for r in entry["steps"] if r["module"] != hlo_name] + [row]
            print(json.dumps(row), flush=True)
        if args.per_op or args.per_op_only:
            print(f"per op: {hlo_name}", flush=True)
            entry["per_op"][hlo_name] = per_op(DATA / hlo_name, args.repeat, args.op_timeout, args.skip_xla)
            entry.setdefault("per_op_meta", {})[hlo_name] = meta
            print_per_op(hlo_name, entry["per_op"][hlo_name], args.top)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"convnet_{base}.json").write_text(json.dumps(entry, indent=2) + "\n")
    rows = [r for e in by_module.values() for r in e["steps"] if not args.only or r["module"] in args.only]
    print_steps(rows)


def print_steps(rows):
    if not rows:
        return
    print("| module | XLA execute | hlo execute | ratio | CPU s XLA / hlo | peak MB hlo / XLA | hlo live-set estimate "
          "| max diff | commit |")
    print("| --- | --: | --: | --: | --: | --: | --: | --: | --- |")
    for r in rows:
        hlo_ms = (f"{r['hlo_execute_s'] * 1e3:.0f} ms" if "hlo_execute_s" in r else
                  f"> {r['hlo_timeout_s']:.0f} s (stopped)" if "hlo_timeout_s" in r else "error")
        xla_ms = f"{r['xla_execute_s'] * 1e3:.0f} ms" if "xla_execute_s" in r else "-"
        ratio = (f"{r['execute_ratio']:.1f}x" if "execute_ratio" in r else
                 f"> {r['hlo_timeout_s'] / r['xla_execute_s']:.0f}x" if "hlo_timeout_s" in r and "xla_execute_s" in r
                 else "-")
        mem = (f"{r['hlo_peak_mb']:.0f} / {r.get('xla_peak_mb', float('nan')):.0f}" if "hlo_peak_mb" in r else "-")
        est = r.get("hlo_live_estimate") or {}
        est_txt = f"{est['peak_live'] / 1e6:.0f} MB" if isinstance(est.get("peak_live"), int) else "-"
        diff = f"{r['max_diff_vs_xla']:.1e}" if "max_diff_vs_xla" in r else "-"
        commit = (r.get("meta") or {}).get("commit", "")
        cpu = " / ".join(f"{r[k]:.1f}" if r.get(k) is not None else "-" for k in ("xla_execute_cpu_s", "hlo_execute_cpu_s"))
        print(f"| {r['module']} | {xla_ms} | {hlo_ms} | {ratio} | {cpu} | {mem} | {est_txt} | {diff} | {commit} |")


def report(results, top):
    """The tables of every benchmarks/results/convnet_*.json (no measurement)."""
    for path in sorted(Path(results).glob("convnet_*.json")):
        entry = json.loads(path.read_text())
        print(f"## {path.name}")
        print_steps(entry.get("steps", []))
        for name, rows in entry.get("per_op", {}).items():
            print_per_op(name, rows, top)
        print()


if __name__ == "__main__":
    main()
