"""The phases of `hlo check`'s front end in one process, each timed on its own (garbage collector off,
as `hlo_cli.parser.parse` runs): importing the front end, loading Lark's tables, the scanner (its
first run in the process, then a second run: the difference is the first-call work), the builder
(likewise), the checker, and the IR cache's write (`serial.dump`), read (`serial.load`) and decoding
of every computation.  Wall and CPU seconds; each run of a phase after the first is the best of
--repeat.

    python benchmarks/bench_phases.py                      # benchmarks/data/transformer.opt.hlo
    python benchmarks/bench_phases.py --repeat 5 FILE
    PYTHONPATH=/other/checkout python benchmarks/bench_phases.py   # another revision

The figures of a revision are comparable only with those of another measured on the same machine in
the same state (a loaded machine stretches the wall times; the CPU times are steadier)."""
from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Clock:
    def __init__(self):
        self.rows: list[tuple[str, float, float]] = []

    def time(self, label: str, fn, repeat: int = 1):
        best_w = best_c = float("inf")
        out = None
        for _ in range(repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            out = fn()
            best_w, best_c = min(best_w, time.perf_counter() - w0), min(best_c, time.process_time() - c0)
        self.rows.append((label, best_w, best_c))
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(HERE / "data" / "transformer.opt.hlo"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    gc.disable()
    clock = Clock()
    frontend = clock.time("import hlo_cli.parser.frontend", lambda: __import__("hlo_cli.parser.frontend",
                                                                             fromlist=["x"]))
    builder = clock.time("import builder, checker", lambda: (__import__("hlo_cli.checker"),
                                                             __import__("hlo_cli.parser.builder", fromlist=["x"]))[1])
    from hlo_cli.checker import check_module
    from hlo_cli.ir import serial
    text = Path(args.file).read_text()
    path = args.file
    clock.time("frontend._parser() (Lark's tables)", frontend._parser)
    raw = clock.time("scan (parse_raw), first", lambda: frontend.parse_raw(text, path))
    module = clock.time("build (build_module), first", lambda: builder.build_module(raw, text, path))
    clock.time("check (check_module)", lambda: check_module(module))
    clock.time("scan again", lambda: frontend.parse_raw(text, path), args.repeat)
    raws = [frontend.parse_raw(text, path) for _ in range(args.repeat)]
    clock.time("build again", lambda: builder.build_module(raws.pop(), text, path), args.repeat)
    data = clock.time("cache write (serial.dump)", lambda: serial.dump(module).getvalue(), args.repeat)
    loaded = clock.time("cache read (serial.load)", lambda: serial.load(data), args.repeat)
    clock.time("decode every computation", lambda: [c.instructions for c in loaded.computations])
    n = sum(len(c.instructions) for c in module.computations)
    print(f"{Path(path).name}: {n:,} instructions in {len(module.computations):,} computations; "
          f"cache entry {len(data) / 1e6:.1f} MB\n")
    print("| phase | wall | CPU |\n| --- | --: | --: |")
    for label, w, c in clock.rows:
        print(f"| {label} | {w:.3f} s | {c:.3f} s |")


if __name__ == "__main__":
    main()
