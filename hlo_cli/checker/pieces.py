"""hlo check of a large module on two cores: the text cut in two (parser/parallel.py), each part
parsed and checked in its own process, the findings joined, and the same findings, in the same
order, as checking the whole module in one process.

Computations are defined before they are called, so the head (the first part) never calls the
tail's computations; the tail's may call the head's, and the tail checks them with the head's
computations as their signatures declare them (the computation headers, read from the head's text).
The head's side then verifies that its checked signatures are those, and runs the walks that need
both parts from a summary of the tail (verify.check_across).  Anything the parts cannot decide alone
(a signature the checker refines, an instruction name in both parts, device counts the parts see
differently, a finding whose place and code both parts report, an error in either part) gives None:
the caller checks the module in one process.

    found = check_text(text, "big.hlo", layout_sensitive=False, warnings=True)
    if found is not None:
        name, instructions, diags, custom_calls = found
"""
from __future__ import annotations

import re
from dataclasses import astuple

from ..errors import Diagnostic
from .verify import HEAD, TAIL, check_across, check_piece, position_key, tail_summary

_HEADER = re.compile(r"\n(?:ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*[({]")     # (in "\n" + text)
# an instruction line's declared shape: what stands between '=' and its opcode
_PARAMETER = re.compile(r"\n[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*([^\n]+?)[ \t]+parameter\((\d+)\)")
_ROOT = re.compile(r"\n[ \t]*ROOT[ \t]+%?[\w.\-]+[ \t]*=[ \t]*([^\n]+?)[ \t]+[a-z][\w\-]*\(")


def check_text(text: str, filename: str, *, layout_sensitive: bool = False, warnings: bool = True,
               replicas: int | None = None, partitions: int | None = None):
    """(module name, instruction count, findings sorted as check_module sorts them, whether the
    module has custom calls), or None when the text must be checked in one process."""
    from ..parser import parallel
    opts = {"layout_sensitive": layout_sensitive, "warnings": warnings, "replicas": replicas,
            "partitions": partitions}
    _warm_up()

    def on_head(module, head_text):
        return check_piece(module, head_text, HEAD, **opts)

    def on_tail(module, tail_text, head_text):
        return _check_tail(module, tail_text, head_text, opts)

    got = parallel.split_parse(text, filename, on_head, on_tail)
    if got is None:
        return None
    head, piece, tail = got
    if piece.unusual or tail.get("unusual") or any(c.is_entry for c in head.computations) or \
            piece.devices != tail["devices"] or tail["header"] != (head.name if head.has_header else None,
                                                                   sorted(head.attrs)):
        return None
    summary = tail["summary"]
    head_items = list(piece.rep.items)
    check_across(head, text, piece, summary, tail["assumed"], warnings)
    if piece.unusual:
        return None
    tail_items = [Diagnostic(*t) for t in tail["items"]]
    keys = {position_key(d) for d in piece.rep.items}
    if any(position_key(d) in keys for d in tail_items):
        return None             # equal keys: which comes first is the walks' order across the parts
    items = head_items + tail_items + piece.rep.items[len(head_items):]
    items.sort(key=position_key)
    count = sum(len(c.instructions) for c in head.computations) + summary["instructions"]
    custom = summary["custom_calls"] or any(i.opcode == "custom-call" for c in head.computations
                                            for i in c.instructions)
    return tail["name"], count, items, custom


def _warm_up():
    """What the first check of a process loads (the parser's grammar and regular expressions, the
    shape rules), loaded before the fork so that the child does not load it again."""
    from ..parser import parallel
    from ..parser.builder import build_module
    from ..parser.frontend import parse_raw
    from .verify import check_module
    parallel.warm_up()
    text = ("HloModule warm\n\nENTRY %e (a: f32[2]) -> f32[2] {\n  %a = f32[2]{0} parameter(0)\n"
            "  ROOT %n = f32[2]{0} negate(f32[2]{0} %a)\n}\n")
    check_module(build_module(parse_raw(text, "<warm-up>"), text, "<warm-up>"), text)


def _check_tail(module, tail_text: str, head_text: str, opts: dict) -> dict:
    """The child's side: the tail checked, its findings and summary in plain values."""
    own = module.computation_map
    used = {n for c in module.computations for i in c.instructions for n in i.called_computations} - own.keys()
    assumed = declared_signatures(head_text, used)
    if assumed is None:
        return {"unusual": "a computation of the head called without a readable signature"}
    piece = check_piece(module, tail_text, TAIL, callee_shapes=assumed, **opts)
    if piece.unusual:
        return {"unusual": piece.unusual}
    return {"unusual": None, "items": [astuple(d) for d in piece.rep.items], "assumed": assumed,
            "devices": piece.devices, "summary": tail_summary(module, opts["warnings"]),
            "name": module.name, "header": (module.name if module.has_header else None, sorted(module.attrs))}


def declared_signatures(text: str, names) -> dict | None:
    """name -> (parameter shapes, result shape) of the computations `names` of `text` as their
    parameter and ROOT instructions declare them (what the checker takes them to be when it checks
    them: a declared shape is the effective one), or None when one is not there or does not read
    (a shape left out, a root not marked ROOT...)."""
    from ..parser.frontend import shape_text_cached
    if not names:
        return {}
    starts = {m.group(1): m.end() for m in _HEADER.finditer("\n" + text) if m.group(1) in names}
    out = {}
    for name in names:
        at = starts.get(name)
        end = text.find("\n}", at) if at is not None else -1
        if end < 0:
            return None
        params, result = {}, None
        try:
            for m in _PARAMETER.finditer(text, at - 1, end):
                params[int(m.group(2))] = shape_text_cached(m.group(1))
            for m in _ROOT.finditer(text, at - 1, end):
                if result is not None:
                    return None
                result = shape_text_cached(m.group(1))
        except Exception:       # noqa: BLE001 -- not a shape this reads: check in one process
            return None
        if result is None or sorted(params) != list(range(len(params))):
            return None
        out[name] = ([params[k] for k in range(len(params))], result)
    return out
