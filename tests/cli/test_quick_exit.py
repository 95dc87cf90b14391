"""A command run from the shell ends without freeing its objects one by one (cli._quick_exit), as
the interpreter's own exit would otherwise: output flushed, threading's exit hooks run and threads
joined, atexit handlers run, the exit status kept.  A thread pool left open (the interpreter's
pools, any library's) must not make the command wait for ever."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "convnets"


def _shell(code: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_an_open_thread_pool_does_not_hold_the_exit():
    code = ("import atexit, concurrent.futures, sys\n"
            "from hlo_cli import cli\n"
            "pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix='idle')\n"
            "print(pool.submit(lambda: 6 * 7).result())\n"
            "atexit.register(lambda: print('atexit ran'))\n"
            "cli._quick_exit(3)\n")
    out = _shell(code, timeout=60)
    assert out.returncode == 3
    assert out.stdout.splitlines() == ["42", "atexit ran"]


def test_hlo_run_from_the_shell_ends(tmp_path):
    """`hlo run` of a convnet (its convolutions run on the interpreter's thread pool) exits 0 with
    its outputs written, through the quick exit (no `args`: sys.argv, as the console script)."""
    out_file = tmp_path / "out.npz"
    code = "import sys\nfrom hlo_cli.cli import main\nsys.argv = ['hlo'] + sys.argv[1:]\nmain()\n"
    out = _shell(code, "run", str(SAMPLES / "mobilenet_v2_tiny.opt.hlo"), "--inputs",
                 str(SAMPLES / "mobilenet_v2_tiny.inputs.npz"), "-o", str(out_file), "--force")
    assert out.returncode == 0, out.stderr
    with np.load(out_file) as z:
        assert len(z.files) >= 1
