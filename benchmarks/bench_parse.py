"""Parse speed: `hlo info` (cold, and warm from the parse cache) against XLA's own C++ parser.

Both read the same text in the same run. XLA's parser is the one JAX ships
(`jaxlib._hlo.hlo_module_from_text`); `hlo` is timed end to end as a user runs it
(`hlo info FILE`: interpreter start-up, imports, reading, parsing, summarizing).

    python benchmarks/bench_parse.py                 # generates the dumps if missing
    python benchmarks/bench_parse.py --repeat 5 FILE...

Prints a Markdown table and writes benchmarks/results/parse.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # run from a checkout without installing
DATA = HERE / "data"


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def hlo_cmd():
    exe = shutil.which("hlo")
    return [exe] if exe else [sys.executable, "-c", "from hlo_cli.cli import main; main()"]


def run_hlo(args, env):
    out = subprocess.run(hlo_cmd() + args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit(f"hlo {' '.join(args)} failed:\n{out.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "parse.json"))
    args = ap.parse_args()
    files = [Path(f) for f in args.files] or [DATA / "transformer.hlo", DATA / "transformer.opt.hlo"]
    if any(not f.exists() for f in files) and not args.files:
        subprocess.run([sys.executable, str(HERE / "gen_transformer.py"), "--out", str(DATA)], check=True)
    from jaxlib import _hlo

    rows = []
    cache = tempfile.mkdtemp(prefix="hlo-bench-cache-")
    try:
        for f in files:
            text = f.read_text()
            xla = best_of(lambda: _hlo.hlo_module_from_text(text), args.repeat)
            env = dict(os.environ, HLO_CACHE_DIR=cache)
            cold = best_of(lambda: run_hlo(["info", "--no-cache", "--format", "json", str(f)], env), args.repeat)
            run_hlo(["info", "--format", "json", str(f)], env)          # fill the cache
            warm = best_of(lambda: run_hlo(["info", "--format", "json", str(f)], env), args.repeat)
            # in-process parse alone (no interpreter start-up), for reference
            from hlo_cli.parser import parse
            inproc = best_of(lambda: parse(text, str(f)), 1)
            rows.append({"file": f.name, "bytes": len(text.encode()), "xla_parse_s": xla,
                         "hlo_info_cold_s": cold, "hlo_info_warm_s": warm, "hlo_parse_inprocess_s": inproc,
                         "cold_ratio": cold / xla, "warm_ratio": warm / xla})
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    import jax
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "jax": jax.__version__, "repeat": args.repeat}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"| file | size | XLA parse | hlo info (cold) | ratio | hlo info (cached) | ratio |")
    print(f"| --- | --: | --: | --: | --: | --: | --: |")
    for r in rows:
        print(f"| {r['file']} | {r['bytes'] / 1e6:.1f} MB | {r['xla_parse_s']:.3f} s | {r['hlo_info_cold_s']:.2f} s "
              f"| {r['cold_ratio']:.1f}x | {r['hlo_info_warm_s']:.2f} s | {r['warm_ratio']:.1f}x |")


if __name__ == "__main__":
    main()
