"""The on-disk cache of IR lives in sources/ and the parser knows nothing of it: a cache hit loads
the module without importing Lark or the parser's front end, and the parser's two-process parse
hands modules over in the IR's own compact form (ir/serial.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hlo_cli.ir.serial import deserialize_module, serialize_module
from hlo_cli.parser import parse

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "jax" / "fori_loop.hlo"

_PROBE = """
import json, sys
import hlo_cli
m = hlo_cli.parse_file(sys.argv[1])
heavy = sorted(k for k in sys.modules if k == "lark" or k.startswith(("lark.", "hlo_cli.parser.frontend",
                                                                          "hlo_cli.parser.builder")))
print(json.dumps({"name": m.name, "instructions": sum(len(c.instructions) for c in m.computations),
                  "heavy": heavy}))
"""


def _probe(cache_dir: Path) -> dict:
    env = dict(os.environ, HLO_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _PROBE, str(SAMPLE)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_cache_hit_imports_neither_lark_nor_the_parser(tmp_path):
    miss = _probe(tmp_path)
    assert "hlo_cli.parser.frontend" in miss["heavy"]     # the first run parses (without Lark: the
    assert "lark" not in miss["heavy"]                      # scanner reads the sample whole)
    hit = _probe(tmp_path)
    assert hit["heavy"] == []                         # the second loads the IR only
    assert (hit["name"], hit["instructions"]) == (miss["name"], miss["instructions"])


def test_serial_round_trip_is_the_same_module():
    text = SAMPLE.read_text()
    m = parse(text, str(SAMPLE))
    assert deserialize_module(serialize_module(m)) == m
