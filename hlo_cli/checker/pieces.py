"""hlo check of a large module on two cores: the text cut in two (parser/parallel.py), each part
parsed and checked in its own process, the findings joined, and the same findings, in the same
order, as checking the whole module in one process.

Computations are defined before they are called, so the head (the first part) never calls the
tail's computations; the tail's may call the head's, and the tail checks those calls with the head's
computations as their parameter and ROOT lines declare them (read from the head's text: a declared
shape is the one the checker goes on with; the headers leave layouts out).  The head's side then
verifies that checking the head found exactly those shapes, and runs the walks that need both parts
from a summary of the tail (verify.check_across).  Anything the parts cannot decide alone (a shape
left out, an instruction name or a computation in both parts, device counts the parts see
differently, a finding whose place and code both parts report, an error in either part) gives None:
the caller checks the module in one process.

    found = check_text(text, "big.hlo", layout_sensitive=False, warnings=True, whole_if="custom-call")
    if found is not None:
        name, instructions, diags, module = found      # module: None unless the text holds `whole_if`
"""
from __future__ import annotations

import re
from dataclasses import astuple

from ..errors import Diagnostic
from ..ir.gcpause import NoGC
from ..parser.frontend import shape_text_cached
from .scan import ModuleScan
from .verify import HEAD, TAIL, check_across, check_piece, position_key, tail_summary

_HEADER = re.compile(r"\n(?:ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*[({]")     # (in "\n" + text)
_TUPLE_END = re.compile(r"\)[ \t]+[a-z][\w\-]*\(")        # a tuple shape's ')' before the opcode
_ROOT = re.compile(r"\n[ \t]*ROOT[ \t]+%?[\w.\-]+[ \t]*=[ \t]*([^\n]*)")     # the rest of a ROOT line


def check_text(text: str, filename: str, *, layout_sensitive: bool = False, warnings: bool = True,
               replicas: int | None = None, partitions: int | None = None, whole_if: str | None = None):
    """(module name, instruction count, findings sorted as check_module sorts them, the whole
    module or None), or None when the text must be checked in one process.  The whole module
    comes back (the tail's IR shipped and joined to the head's) when the text holds `whole_if`."""
    from ..parser import parallel
    opts = {"layout_sensitive": layout_sensitive, "warnings": warnings, "replicas": replicas,
            "partitions": partitions}
    _warm_up()

    def on_head(module, head_text):
        return check_piece(module, head_text, HEAD, **opts)

    whole = whole_if is not None and whole_if in text

    def on_tail(module, tail_text, head_text):
        found = _check_tail(module, tail_text, head_text, opts)
        if whole and not found["unusual"]:
            from ..ir.serial import serialize_module
            found["ir"] = serialize_module(module)
        return found

    with NoGC():        # (the IR has no cycles: collections would only traverse it)
        got = parallel.split_parse(text, filename, on_head, on_tail)
        return None if got is None else _join(text, got, warnings, whole)


def _join(text: str, got, warnings: bool, whole: bool):
    """check_text's answer from what the two parts found (None when they cannot stand for the whole)."""
    from ..parser import parallel
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
    module = None
    if whole:
        from ..ir.serial import deserialize_module
        module = parallel.join(head, deserialize_module(tail["ir"]), text)
        if module is None:
            return None
    return tail["name"], count, items, module


def _warm_up():
    """What the first check of a process loads (the parser's grammar and regular expressions, the
    shape rules), loaded before the fork so that the child does not load it again."""
    from ..parser import parallel
    from ..parser.builder import build_module
    from ..parser.frontend import parse_raw
    from .verify import check_module
    parallel.warm_up()
    text = ("HloModule warm\n\nENTRY %e (a: f32[2]) -> f32[2] {\n  %a = f32[2]{0} parameter(0)\n"
            "  ROOT %n = f32[2]{0} negate(%a)\n}\n")
    check_module(build_module(parse_raw(text, "<warm-up>"), text, "<warm-up>"), text)


def _check_tail(module, tail_text: str, head_text: str, opts: dict) -> dict:
    """The child's side: the tail checked, its findings and summary in plain values."""
    own = module.computation_map
    scan = ModuleScan(module)
    used = scan.called - own.keys()
    assumed = declared_signatures(head_text, used)
    if assumed is None:
        return {"unusual": "a computation of the head called without a readable signature"}
    piece = check_piece(module, tail_text, TAIL, callee_shapes=assumed, scan=scan, **opts)
    if piece.unusual:
        return {"unusual": piece.unusual}
    return {"unusual": None, "items": [astuple(d) for d in piece.rep.items], "assumed": assumed,
            "devices": piece.devices, "summary": tail_summary(module, opts["warnings"], scan),
            "name": module.name, "header": (module.name if module.has_header else None, sorted(module.attrs))}


def declared_signatures(text: str, names) -> dict | None:
    """name -> (parameter shapes, result shape) of the computations `names` of `text` as their
    parameter and ROOT instructions declare them (what the checker takes them to be when it checks
    them: a declared shape is the effective one), or None when one is not there or does not read
    (a shape left out, a root not marked ROOT...)."""
    if not names:
        return {}
    starts = {m.group(1): m.end() for m in _HEADER.finditer("\n" + text) if m.group(1) in names}
    out = {}
    for name in names:
        at = starts.get(name)
        end = text.find("\n}", at) if at is not None else -1
        sig = _body_signature(text[at - 1:end]) if end >= 0 else None
        if sig is None:
            return None
        out[name] = sig
    return out


def _body_signature(body: str):
    """(parameter shapes, result shape) declared by the parameter and ROOT lines of `body`, or None."""
    params = {}
    try:
        k = body.find(" parameter(")
        while k >= 0:
            line = body[body.rfind("\n", 0, k) + 1:k]
            close = body.find(")", k)
            params[int(body[k + 11:close])] = shape_text_cached(line[line.index("=") + 1:].strip())
            k = body.find(" parameter(", close)
        roots = _ROOT.findall(body)
        if len(roots) != 1 or sorted(params) != list(range(len(params))):
            return None
        line = roots[0]
        end = _TUPLE_END.search(line) if line.startswith("(") else None
        shape = line[:end.start() + 1] if end else line.split(None, 1)[0]
        return [params[n] for n in range(len(params))], shape_text_cached(shape)
    except Exception:       # noqa: BLE001 -- not a shape this reads (or none): check in one process
        return None
