"""The terminal form of a DiffReport."""
from __future__ import annotations


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _side(e: dict, s: str) -> str:
    where = e.get(f"computation_{s}", "")
    inside = f" in {e[f'in_{s}']}" if e.get(f"in_{s}") else ""
    loc = e.get(f"location_{s}")
    return f"{e[s]} ({where}{inside}{', ' + loc if loc else ''})"


def format_text(report, max_first: int = 5, max_only: int = 8) -> str:
    """REPORT for a person: the results, the first differing instructions with the operands that still
    agreed, the instructions only one module has, and the counts."""
    doc = report.to_json(max_pairs=0)
    s = doc["summary"]
    lines = [f"A: {doc['a'] or doc['module_a']}  (module {doc['module_a']})",
             f"B: {doc['b'] or doc['module_b']}  (module {doc['module_b']})",
             f"tolerance: |b - a| <= {report.atol:g} + {report.rtol:g} * |a|", ""]
    lines += _stopped(doc)
    lines += _results(doc)
    first = doc["first_differences"]
    if first:
        lines.append("")
        lines.append(f"first differing instructions ({len(first)}, in B's execution order; each one's operands "
                     f"agree):")
        for k, e in enumerate(first[:max_first], 1):
            lines += _first_difference(k, e)
        if len(first) > max_first:
            lines.append(f"  ... and {len(first) - max_first} more (--format json lists them)")
    elif s["differing"]:
        lines.append("")
        lines.append(f"{s['differing']} instructions differ")
    for side, names in (("A", doc["only_in_a"]), ("B", doc["only_in_b"])):
        if names:
            shown = ", ".join(names[:max_only]) + (", ..." if len(names) > max_only else "")
            lines.append("")
            lines.append(f"only in {side}: {len(names)} instruction{'s' if len(names) != 1 else ''} ({shown})")
    by = ", ".join(f"{k} {v}" for k, v in sorted(s["matched_by"].items(), key=lambda kv: -kv[1]))
    lines.append("")
    lines.append(f"{s['matched']} instructions of B matched and compared ({by}): {s['agreeing']} agree, "
                 f"{s['differing']} differ, {s['skipped']} not comparable")
    limited = [p for p in report.states.values() if p.compared < p.executions and p.how != "value"]
    if limited:
        lines.append(f"({len(limited)} instructions ran more often than the executions compared, --executions)")
    lines.append(_verdict(report, doc))
    return "\n".join(lines)


def _stopped(doc) -> list[str]:
    """Where each side stopped, when one did."""
    lines = []
    for side, st in sorted(doc["stopped"].items()):
        where = f"{st['location']}: " if st.get("location") else ""
        lines.append(f"{side.upper()} STOPPED after {st['instructions_run']} instructions, at {where}"
                     f"%{st['instruction']}: {st['reason']}")
        lines += [f"  {st['hint']}"] if st.get("hint") else []
    if doc["stopped"]:
        lines += ["  every value up to there is compared below; the results are not", ""]
    return lines


def _results(doc) -> list[str]:
    """The comparison of the results, one line each (agreeing ones only when there are few)."""
    agree = [r for r in doc["results"] if r["status"] == "agree"]
    worst = max((r["max_abs_diff"] or 0.0 for r in agree), default=0.0)
    most = f" (max |diff| {_num(worst)})" if agree else ""
    lines = [f"results: {len(agree)} of {len(doc['results'])} agree{most}"]
    nonfinite = [r["key"] for r in doc["results"] if r.get("nonfinite")]
    if nonfinite:
        lines.append(f"  note: {', '.join(nonfinite)} {'hold' if len(nonfinite) > 1 else 'holds'} NaN or Inf in both "
                     f"modules (hlo run --check-finite finds where the first one is made)")
    for r in doc["results"]:
        if r["status"] == "agree":
            if len(doc["results"]) <= 8:
                nf = f"; both hold NaN/Inf in {r['nonfinite']} of {r['size']} elements" if r.get("nonfinite") else ""
                lines.append(f"  {r['key']}: agree (max |diff| {_num(r['max_abs_diff'])}{nf})")
        elif r["status"] == "skipped":
            lines.append(f"  {r['key']}: NOT COMPARED ({r.get('note')})")
        else:
            at = f" at {r['where']} (A {r.get('a_value')} vs B {r.get('b_value')})" if r.get("where") is not None else ""
            n = f", {r['mismatched']} of {r['size']} elements" if "mismatched" in r else ""
            note = f" ({r['note']})" if r.get("note") else ""
            lines.append(f"  {r['key']}: DIFFER, max |diff| {_num(r['max_abs_diff'])}, max rel "
                         f"{_num(r['max_rel_diff'])}{at}{n}{note}")
    return lines


def _first_difference(k: int, e: dict) -> list[str]:
    """The k-th first differing instruction: both sides, where it differs, and its operand chain."""
    op = e["opcode_a"] if e["opcode_a"] == e["opcode_b"] else f"{e['opcode_a']} vs {e['opcode_b']}"
    shp = e["shape_a"] if e["shape_a"] == e["shape_b"] else f"{e['shape_a']} vs {e['shape_b']}"
    lines = [f"  {k}. A {_side(e, 'a')}", f"     B {_side(e, 'b')}   [matched by {e['how']}]", f"     {op} {shp}"]
    for side in ("a", "b"):
        md = [x for x in (e.get(f"op_name_{side}"), e.get(f"source_{side}")) if x]
        if md:
            lines.append(f"     {side.upper()} metadata: " + "  ".join(md))
    ex = ""
    if e.get("executions", 1) > 1:
        ex = f" (execution {e.get('first_differing_execution', 1)} of {e['executions']}"
        if e.get("compared_executions") is not None:
            ex += f", the first {e['compared_executions']} compared"
        ex += ")"
    n = f"; {e['mismatched']} of {e['size']} elements beyond tolerance" if "mismatched" in e else ""
    lines.append(f"     max |diff| {_num(e['max_abs_diff'])} at {e['where']} (A {e.get('a_value')} vs "
                 f"B {e.get('b_value')}), max rel {_num(e['max_rel_diff'])}{n}{ex}")
    if e.get("note"):
        lines.append(f"     note: {e['note']}")
    if e["chain"]:
        lines.append("     operands (the values it reads, and theirs):")
        lines += [_chain_line(c) for c in e["chain"]]
    return lines


def _chain_line(c: dict) -> str:
    pad = "       " + "  " * (c["depth"] - 1)
    if c.get("a") is None:
        return f"{pad}{c['b']} ({c.get('opcode_b')}): only in B, not compared"
    name = c["a"] if c["a"] == c["b"] else f"{c['a']} ~ {c['b']}"
    d = f", max |diff| {_num(c['max_abs_diff'])}" if c["max_abs_diff"] and \
        c["status"] in ("agree", "differ") else ""
    return f"{pad}{name} ({c['opcode_b']} {c['shape_b']}): {c['status']}{d}"


def _verdict(report, doc) -> str:
    s = doc["summary"]
    if report.verdict == "incomplete":
        who = " and ".join(side.upper() for side in sorted(doc["stopped"]))
        return (f"verdict: incomplete: no value compared differs, up to where {who} stopped at an instruction "
                f"hlo cannot run")
    if doc["stopped"]:
        return "verdict: values differ before the run stopped (see above)"
    if report.results_agree:
        tail = "" if not s["differing"] else f" ({s['differing']} intermediate values differ)"
        return f"verdict: the results agree{tail}"
    if all(r["status"] != "differ" for r in doc["results"]):
        return "verdict: the results could not all be compared (see above)"
    return "verdict: the results differ"
