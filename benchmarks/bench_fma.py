"""The cost of XLA CPU's FMA contraction (hlo_cli/interpreter/contraction.py): hlo's execution with
contraction (bit-exact) and without it (the multiply and the add rounded separately, as before),
same process, same inputs, best of --repeat in processor time (all threads: the figure is the
work done, which a loaded machine disturbs less than the wall time; XLA's column is wall time); and how many outputs are bit-equal to XLA's either way.
The FMA is timed twice: on the exact NumPy path (``HLO_NATIVE=0``) and on the processor's FMA
(interpreter/hwfma.py, ``HLO_NATIVE=1``; needs llvmlite, the ``native`` extra).  Then the one-time
cost of the native kernels in a fresh process: importing llvmlite and compiling them (an empty
cache), or loading them from the cache.

Cases: a chain of elementwise multiply-adds on large f32 and f64 arrays ((a*b+c)*d+e, a*b-c*d),
and the transformer training step of benchmarks/data (gen_transformer.py) before and after XLA's
optimizations, compared with its expected outputs.

    python benchmarks/bench_fma.py [--repeat 3] [--n 4194304] [--data DIR]

Prints a Markdown table and writes benchmarks/results/fma.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from timing import best_of

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

_CHAIN = """HloModule chain_{t}

ENTRY main {{
  a = {t}[{n}] parameter(0)
  b = {t}[{n}] parameter(1)
  c = {t}[{n}] parameter(2)
  d = {t}[{n}] parameter(3)
  x = {t}[{n}] parameter(4)
  m0 = {t}[{n}] multiply(a, b)
  q0 = {t}[{n}] add(m0, c)
  m1 = {t}[{n}] multiply(q0, d)
  q1 = {t}[{n}] add(m1, x)
  m2 = {t}[{n}] multiply(c, d)
  q2 = {t}[{n}] subtract(q1, m2)
  ROOT r = {t}[{n}] add(q2, a)
}}
"""


def _switch(on: bool, native: bool = False):
    """Contraction on or off for the modules prepared from now on (``HLO_FMA``, read when a
    computation is prepared); the processor's FMA or the NumPy path (``HLO_NATIVE``, read per FMA)."""
    os.environ["HLO_FMA"] = "1" if on else "0"
    os.environ["HLO_NATIVE"] = "1" if native else "0"


def _time(text, args, repeat, on: bool, native: bool = False):
    from hlo_cli import parse
    from hlo_cli.interpreter.evaluator import run_module
    from hlo_cli.interpreter.values import leaves
    _switch(on, native)
    module = parse(text)
    run_module(module, args)                     # prepares (compiles) the module once
    best, out = float("inf"), None
    for _ in range(repeat):                      # processor time: the machine may be shared
        t = time.process_time()
        out = run_module(module, args)
        best = min(best, time.process_time() - t)
    return best, [np.asarray(v) for v in leaves(out)]


def _exact(outs, ref) -> str:
    same = sum(o.tobytes() == r.tobytes() for o, r in zip(outs, ref))
    return f"{same}/{len(ref)}"


def _xla(text, args, repeat):
    from hlo_cli.tools.xla_reference import XlaExecutable
    exe = XlaExecutable(text)
    exe(args)
    t, out = best_of(lambda: exe(args), repeat)
    return t, [np.asarray(v) for v in out]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--data", default=str(HERE / "data"))
    a = ap.parse_args(argv)
    rows = []
    rng = np.random.default_rng(0)
    for t, dt in (("f32", np.float32), ("f64", np.float64)):
        text = _CHAIN.format(t=t, n=a.n)
        args = [rng.standard_normal(a.n).astype(dt) for _ in range(5)]
        tx, ref = _xla(text, args, a.repeat)
        rows.append(_row(f"chain {t}[{a.n}] (3 contractions)", tx, text, args, a.repeat, ref))
    data = Path(a.data)
    if (data / "transformer.hlo").exists():
        with np.load(data / "transformer.inputs.npz") as z:
            args = [z[f"arg{k}"] for k in range(len(z.files))]
        with np.load(data / "transformer.expected.npz") as z:
            ref = [z[f"out{k}"] for k in range(len(z.files))]
        for name in ("transformer.hlo", "transformer.opt.hlo"):
            text = (data / name).read_text()
            rows.append(_row(name, None, text, args, a.repeat, ref))
    print("| case | XLA wall s | hlo, two roundings, CPU s | hlo, FMA in NumPy, CPU s | cost | "
          "hlo, processor's FMA, CPU s | cost | outputs bit-equal (two roundings -> FMA) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        xla = f"{r['xla_s']:.4f}" if r["xla_s"] is not None else "-"
        native = "-" if r["native_s"] is None else \
            f"{r['native_s']:.4f} | {(r['native_s'] / r['plain_s'] - 1) * 100:+.0f}%"
        print(f"| {r['case']} | {xla} | {r['plain_s']:.4f} | {r['fma_s']:.4f} | "
              f"{(r['fma_s'] / r['plain_s'] - 1) * 100:+.0f}% | {native} | {r['exact_plain']} -> {r['exact_fma']} |")
    first = _first_run(a.repeat)
    if first:
        print(f"\nnative kernels in a fresh process (best of {a.repeat}): import llvmlite and compile "
              f"{first['compile_s']:.3f} s, import and load from the cache {first['load_s']:.3f} s")
    out = HERE / "results" / "fma.json"
    out.write_text(json.dumps({"repeat": a.repeat, "rows": rows, "first_run": first}, indent=1) + "\n")


def _row(case, xla_s, text, args, repeat, ref):
    """Two roundings, the FMA in NumPy and on the processor (when it can), bit-equality with `ref`."""
    from hlo_cli.interpreter import hwfma
    t0, o0 = _time(text, args, repeat, False)
    t1, o1 = _time(text, args, repeat, True)
    native = None
    os.environ["HLO_NATIVE"] = "1"
    if hwfma.mode() != "off":
        t2, o2 = _time(text, args, repeat, True, native=True)
        if hwfma.ready():
            native = t2
            assert [v.tobytes() for v in o2] == [v.tobytes() for v in o1], f"{case}: native FMA bits differ"
    return {"case": case, "xla_s": xla_s, "plain_s": t0, "fma_s": t1, "native_s": native,
            "exact_plain": _exact(o0, ref), "exact_fma": _exact(o1, ref)}


_FIRST = """import time, numpy as np
from hlo_cli.interpreter import hwfma
x = np.ones(4)
t = time.perf_counter()
assert hwfma.fma(x, x, x, False, False) is not None
print(time.perf_counter() - t)
"""


def _first_run(repeat):
    """{'compile_s', 'load_s'}: the native kernels' one-time cost in a fresh process (wall time,
    best of `repeat`), with an empty cache directory and with the one the first run filled."""
    import subprocess
    import tempfile
    env = dict(os.environ, HLO_NATIVE="1", PYTHONPATH=str(HERE.parent))
    got = {"compile_s": float("inf"), "load_s": float("inf")}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache:
            env["HLO_CACHE_DIR"] = cache
            for key in ("compile_s", "load_s"):
                p = subprocess.run([sys.executable, "-c", _FIRST], env=env, capture_output=True, text=True)
                if p.returncode:
                    return None
                got[key] = min(got[key], float(p.stdout))
    return got


if __name__ == "__main__":
    main()
