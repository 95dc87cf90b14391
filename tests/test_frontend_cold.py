"""The front end's first-call work: `frontend.warm_up()` (called before forking), and the Lark-free
readings of the common module prefix, which must give exactly the records Lark's parse gives."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_warm_up_leaves_nothing_for_the_first_parse_to_compile():
    """After warm_up() the scanner's regexes and Lark's tables are there: a fresh process that warms
    up and then parses reads a module in the one-pass form without compiling those again."""
    code = ("from hlo_cli.parser import frontend, parse\n"
            "frontend.warm_up()\n"
            "regexes = (frontend._scanner_regexes(), frontend.fused_regexes(), frontend._parser())\n"
            "m = parse('HloModule m\\nENTRY e {\\n  p = f32[2]{0} parameter(0)\\n  ROOT a = f32[2]{0} add(p, p)\\n}\\n')\n"
            "assert (frontend._scanner_regexes(), frontend.fused_regexes(), frontend._parser()) == regexes\n"
            "print(m.entry_computation.root_instruction.opcode)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "add"
