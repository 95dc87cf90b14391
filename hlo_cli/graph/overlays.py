"""Values on the nodes of a graph: from a run's dump, a profile, or a diff (`hlo graph --overlay`).

`load_overlays(path, module) -> list[Overlay]` reads one of:

* an `hlo run --dump-dir` directory (or its manifest.json): per instruction, over all its
  executions and tuple leaves (and devices): min, max, mean, the largest magnitude, NaN and Inf
  counts.  The first instruction (in the order the run executed them) whose value holds a NaN or
  an Inf is `Overlay.first`: drawings make it stand out;
* the JSON of `hlo run --profile --format json` (or its "profile" object): self and total
  milliseconds, calls and share of the run for the instructions the profile lists (its top
  instructions by self time); a fused elementwise group's time goes to every member, marked;
* the JSON of `hlo diff --format json`: per pair of instructions, agree / differ / skipped and the
  largest absolute and relative differences, on the side (a or b) of the module drawn (the side
  whose instruction names match the module); the first difference is `Overlay.first`.

Values are keyed by node id (model.node_ids), for every instruction of the module whether a given
drawing shows it or not; `project(overlay, graph)` puts them on the drawn nodes (an instruction
inside a collapsed fusion gives its values to the fusion's node when that has none of its own,
and a first non-finite value or first difference inside it marks the fusion's node).

`style(projected, overlay)` gives each drawn node a fill colour and the legend rows of that
colouring; DOT, SVG, HTML and Model Explorer drawings share it.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HloInputError
from ..pipeline.dumps import MANIFEST
from .model import Graph, node_ids


@dataclass
class Overlay:
    """Values on the nodes of one module, from one source."""
    name: str                        # what the legend calls it: "dump: run/", "profile: p.json"
    kind: str                        # stats | profile | diff
    values: dict[str, dict[str, float | str]] = field(default_factory=dict)   # node id -> metric -> value
    primary: str = ""                # the metric nodes are coloured by
    first: str | None = None         # the node that stands out: first non-finite value, first difference
    source: str = ""                 # the path it was read from
    note: str = ""                   # one line on what it holds (for captions)
    warnings: list[str] = field(default_factory=list)   # what the CLI should say (values left out)


class OverlayError(HloInputError):
    """An --overlay that cannot be read or does not belong to the module (exit 2)."""


# ----------------------------------------------------------------------------- reading

def load_overlays(path: str, module) -> list[Overlay]:
    """The overlays held by PATH (a dump directory, a manifest, a profile or diff JSON) for MODULE.
    Raises OverlayError when PATH is unreadable, of no known kind, or names none of MODULE's
    instructions."""
    p = Path(path)
    if p.is_dir():
        man = p / MANIFEST
        if not man.is_file():
            raise OverlayError(f"--overlay {path}: a directory without a manifest.json (an `hlo run "
                               f"--dump-dir` directory has one)")
        p = man
    text = read_json_text(p, "--overlay", path)
    try:
        doc = json.loads(text)
    except RecursionError:
        raise OverlayError(f"--overlay {path}: the JSON nests too deeply to be read") from None
    except ValueError as e:
        raise OverlayError(f"--overlay {path}: not JSON ({e}); give an `hlo run --dump-dir` directory, its "
                           f"manifest.json, `hlo run --profile --format json` or `hlo diff --format json` "
                           f"output") from None
    if not isinstance(doc, dict):
        raise OverlayError(f"--overlay {path}: the JSON is not an object")
    ids = node_ids(module)
    resolve = _resolver(ids)
    out = []
    if isinstance(doc.get("instructions"), list) and doc.get("instructions") and \
            isinstance(doc["instructions"][0], dict) and ("stats" in doc["instructions"][0]
                                                          or "per_device" in doc["instructions"][0]):
        out.append(_from_manifest(doc, path, resolve, module.name, module))
    elif isinstance(doc.get("instructions"), list) and not doc.get("instructions") and "status" in doc:
        raise OverlayError(f"--overlay {path}: the dump lists no instructions")
    elif isinstance(doc.get("profile"), dict) or "top_instructions" in doc:
        out.append(_from_profile(doc.get("profile", doc), path, resolve, module.name))
    elif isinstance(doc.get("pairs"), list):
        out.append(_from_diff(doc, path, module, ids))
    else:
        raise OverlayError(f"--overlay {path}: neither an `hlo run --dump-dir` manifest, nor `hlo run --profile "
                           f"--format json` output, nor `hlo diff --format json` output")
    for ov in out:
        if not ov.values:
            raise OverlayError(f"--overlay {path}: none of its instructions is in module {module.name} "
                               f"(an overlay of another module?)")
    return out


def read_json_text(p: Path, option: str, shown: str) -> str:
    """The text of a JSON file given to OPTION, read the way every input file is: only a regular
    file (a FIFO, a device such as /dev/zero, a socket refused before a byte is read), binary data
    refused from its first block, then UTF-8.  Raises OverlayError (exit 2)."""
    from ..sources.reading import CONTROL_BYTE, SNIFF_BYTES, NotRegularFile, open_regular
    try:
        with open_regular(p) as f:
            data = f.read(SNIFF_BYTES)
            bad = CONTROL_BYTE.search(data)
            if bad is not None:
                raise OverlayError(f"{option} {shown}: binary data (byte 0x{data[bad.start()]:02x} at offset "
                                   f"{bad.start()}), not JSON")
            data += f.read()
    except NotRegularFile as e:
        raise OverlayError(f"{option} {shown}: is {e.kind}, not a regular file") from None
    except FileNotFoundError:
        raise OverlayError(f"{option} {shown}: no such file or directory") from None
    except OSError as e:
        raise OverlayError(f"{option} {shown}: cannot read it ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OverlayError(f"{option} {shown}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                           f"{e.start})") from None


def _resolver(ids: dict):
    """(computation, instruction) -> node id; an instruction the compiled path ran inlined (a fused
    instruction reported under its caller's computation) is found by its name when that is unique."""
    by_name: dict[str, list] = {}
    for (c, n), nid in ids.items():
        by_name.setdefault(n, []).append(nid)

    def resolve(comp, name):
        nid = ids.get((comp, name))
        if nid is None and name in by_name and len(by_name[name]) == 1:
            nid = by_name[name][0]
        return nid
    return resolve


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _operand_names(module) -> dict:
    """(computation, instruction) -> the names of its operands (same computation)."""
    out = {}
    for comp in getattr(module, "computations", ()) or ():
        for inst in comp.instructions:
            out[(comp.name, inst.name)] = tuple(getattr(o, "name", o) for o in inst.operands)
    return out


def _from_manifest(doc: dict, path: str, resolve, module_name: str = "?", module=None) -> Overlay:
    """As `hlo run --check-finite` judges: the first non-finite value is the first one made out of
    finite operands (or an input that holds one); a constant (a -inf mask, a max-pool's initial
    value) is not an origin, and a value that only carries an operand's NaN or Inf is not either."""
    operands = _operand_names(module) if module is not None else {}
    entry = getattr(module, "entry", None)

    def can_start(e) -> bool:          # an entry parameter is an input: a NaN there starts there
        op = e.get("opcode")
        return op != "constant" and (op != "parameter" or entry is None or e.get("computation") == entry)
    last_bad: dict = {}                  # (computation, instruction) -> its latest execution held a NaN/Inf
    acc: dict[str, dict] = {}
    first, first_order = None, None
    dumped, missing = set(), set()       # (computation, instruction) of the dump; those not in the module
    missed_first, missed_order = None, None   # the dump's first non-finite value, when not in the module
    for e in doc["instructions"]:
        if not isinstance(e, dict):
            continue
        key = (e.get("computation"), e.get("instruction"))
        dumped.add(key)
        nid = resolve(*key)
        if nid is None:
            missing.add(key)
            bad = any(isinstance(s, dict) and (s.get("nan") or s.get("inf"))
                      for s in list(e.get("stats") or ()) + [t for d in e.get("per_device") or ()
                                                              if isinstance(d, dict) for t in d.get("stats") or ()])
            order = e.get("order", 0) if isinstance(e.get("order"), (int, float)) else 0
            last_bad[key] = bool(bad)
            bad = bad and can_start(e)
            if bad and (missed_order is None or order < missed_order):
                missed_first, missed_order = key[1], order
            continue
        leaves = list(e.get("stats") or ())
        for d in e.get("per_device") or ():
            leaves.extend(d.get("stats") or ())
        a = acc.setdefault(nid, {"executions": 0, "nan": 0, "inf": 0, "_means": [], "_min": None, "_max": None,
                                 "dtype": None, "first_order": e.get("order")})
        a["executions"] += 1
        nonfinite = 0
        for s in leaves:
            if not isinstance(s, dict):
                continue
            a["dtype"] = a["dtype"] or s.get("dtype")
            nan, inf = int(s.get("nan") or 0), int(s.get("inf") or 0)
            a["nan"] += nan
            a["inf"] += inf
            nonfinite += nan + inf
            lo = _num(s.get("min", s.get("min_abs")))
            hi = _num(s.get("max", s.get("max_abs")))
            if lo is not None:
                a["_min"] = lo if a["_min"] is None else min(a["_min"], lo)
            if hi is not None:
                a["_max"] = hi if a["_max"] is None else max(a["_max"], hi)
            m = _num(s.get("mean"))
            if m is not None:
                a["_means"].append(m)
        last_bad[key] = bool(nonfinite)
        if nonfinite:
            a["nonfinite_executions"] = a.get("nonfinite_executions", 0) + 1
            order = e.get("order", 0)
            origin = can_start(e) and \
                not any(last_bad.get((key[0], o)) for o in operands.get(key, ()))
            if origin and (first_order is None or order < first_order):
                first, first_order = nid, order
    values = {}
    for nid, a in acc.items():
        v: dict = {"executions": a["executions"], "nan": a["nan"], "inf": a["inf"],
                   "nonfinite": a["nan"] + a["inf"]}
        if a["_min"] is not None:
            v["min"] = a["_min"]
        if a["_max"] is not None:
            v["max"] = a["_max"]
        if a["_means"]:
            v["mean"] = sum(a["_means"]) / len(a["_means"])
        if a["_min"] is not None or a["_max"] is not None:
            v["max_abs"] = max(abs(x) for x in (a["_min"], a["_max"]) if x is not None)
        if a["dtype"]:
            v["dtype"] = a["dtype"]
        if a.get("nonfinite_executions"):
            v["nonfinite_executions"] = a["nonfinite_executions"]
        v["status"] = "non-finite" if v["nonfinite"] else "finite"
        values[nid] = v
    if first is not None:
        values[first]["status"] = "first non-finite"
        values[first]["first_nonfinite"] = 1
    any_bad = any(v["nonfinite"] for v in values.values())
    if missed_first is not None and (first_order is None or missed_order < first_order):
        # the run's first non-finite value is in an instruction this module does not have
        first = None
    note = (f"run {doc.get('status', '?')}; " + (f"first non-finite value: {first}" if first else
                                                  f"the run's first non-finite value ({missed_first}) is not in "
                                                  f"this module" if missed_first else "every value finite"))
    warnings = []
    if missing:
        warnings.append(f"--overlay {path}: {len(missing):,} of its {len(dumped):,} instructions are not in module "
                        f"{module_name} drawn here (a dump of another text of it? values are put on "
                        f"instructions by name)"
                        + (f"; the run's first non-finite value ({missed_first}) is one of them"
                           if missed_first else ""))
    return Overlay(f"values ({_short(path)})", "stats", values, "nonfinite" if any_bad else "max_abs", first,
                   str(path), note, warnings)


def _from_profile(prof: dict, path: str, resolve, module_name: str = "?") -> Overlay:
    rows = prof.get("top_instructions")
    if not isinstance(rows, list):
        raise OverlayError(f"--overlay {path}: a profile without top_instructions")
    run_ms = _num(prof.get("run_ms")) or 0.0
    values: dict[str, dict] = {}
    missing = 0                           # rows none of whose instructions the module has
    for r in rows:
        if not isinstance(r, dict):
            continue
        members = r.get("members") or [r.get("instruction")]
        if all(resolve(r.get("computation"), name) is None for name in members):
            missing += 1
        for name in members:
            nid = resolve(r.get("computation"), name)
            if nid is None:
                continue
            v = values.setdefault(nid, {"self_ms": 0.0, "total_ms": 0.0, "percent": 0.0})
            v["self_ms"] = round(v["self_ms"] + (_num(r.get("self_ms")) or 0.0), 6)
            v["total_ms"] = round(v["total_ms"] + (_num(r.get("total_ms")) or 0.0), 6)
            v["percent"] = round(v["percent"] + (_num(r.get("percent")) or 0.0), 4)
            if r.get("calls") is not None:
                v["calls"] = r["calls"]
            if r.get("samples"):
                v["samples"] = r["samples"]
            if r.get("members"):
                v["fused_group"] = f"{len(r['members'])} elementwise instructions timed as one, as {r.get('instruction')}"
    note = (f"{len(rows)} instructions by self time of a {run_ms:.3f} ms run ({prof.get('mode', '?')})"
            + ("; the run stopped" if prof.get("stopped") else ""))
    warnings = [f"--overlay {path}: {missing:,} of its {len(rows):,} instructions are not in module {module_name} "
                f"drawn here (a profile of another text of it? times are put on instructions by name)"] if missing else []
    return Overlay(f"time ({_short(path)})", "profile", values, "self_ms", None, str(path), note, warnings)


def _same_file(a, b) -> bool:
    try:
        return isinstance(a, str) and isinstance(b, str) and a not in ("-", "<string>") and \
            Path(os.path.realpath(a)) == Path(os.path.realpath(b))
    except (OSError, ValueError):
        return False


def _diff_side(doc: dict, pairs: list, module, ids: dict) -> str:
    """Which side of a diff MODULE is: the one whose file it was read from; else the one whose
    instructions (computation and name) it has more of; else the one of its module name; else a."""
    src = getattr(module, "source", None)
    hits_file = [s for s in ("a", "b") if _same_file(doc.get(s), src)]
    if len(hits_file) == 1:
        return hits_file[0]

    def hits(side):
        return sum(1 for p in pairs if (p.get(f"computation_{side}"), p.get(side)) in ids)
    ha, hb = hits("a"), hits("b")
    if ha != hb:
        return "a" if ha > hb else "b"
    names = [s for s in ("a", "b") if doc.get(f"module_{s}") == module.name
             or (isinstance(doc.get(s), dict) and doc[s].get("module") == module.name)]
    return names[0] if len(names) == 1 else "a"


def _from_diff(doc: dict, path: str, module, ids: dict) -> Overlay:
    pairs = [p for p in doc["pairs"] if isinstance(p, dict)]
    side = _diff_side(doc, pairs, module, ids)
    other = "b" if side == "a" else "a"
    resolve = _resolver(ids)
    values: dict[str, dict] = {}
    first = None
    for p in pairs:
        nid = resolve(p.get(f"computation_{side}"), p.get(side))
        if nid is None:
            continue
        v: dict = {"status": str(p.get("status", "?")), "paired_with": str(p.get(other))}
        for k in ("max_abs_diff", "max_rel_diff", "mismatched", "size", "executions"):
            x = _num(p.get(k))
            if x is not None:
                v[k] = x
        for k in ("how", "where"):
            if p.get(k) not in (None, ""):
                v["matched_by" if k == "how" else k] = str(p[k])
        if p.get("status") == "differ" and first is None:
            first = nid
        values[nid] = v
    # the first differences (each differing while its operands agree): where the modules diverge
    origins = []
    for f in doc.get("first_differences") or ():
        name = f.get(side) if isinstance(f, dict) else (f if isinstance(f, str) else None)
        comp = f.get(f"computation_{side}") if isinstance(f, dict) else None
        nid = resolve(comp, name) if name else None
        if nid is not None and nid in values:
            origins.append(nid)
    if origins:
        first = origins[0]
    for k, nid in enumerate(origins):
        values[nid]["diverges_here"] = 1
        values[nid]["status"] = "diverges here"
    if first is not None and first in values:
        values[first]["first_difference"] = 1
        values[first]["status"] = "first difference"
    note = (f"side {side} of a diff; verdict: {doc.get('verdict', '?')}"
            + (f"; first difference: {first}" if first else "")
            + (f"; {len(origins)} places where the values start to differ" if len(origins) > 1 else ""))
    return Overlay(f"diff ({_short(path)})", "diff", values, "max_rel_diff", first, str(path), note)


def _short(path) -> str:
    p = Path(str(path))
    return p.parent.name + "/" if p.name == MANIFEST else p.name


# ----------------------------------------------------------------------------- on a drawing

def project(overlay: Overlay, graph: Graph) -> dict[str, dict]:
    """The overlay's values on the nodes GRAPH draws (see the module's docstring)."""
    out: dict[str, dict] = {}
    inner: dict[str, list] = {}
    for nid, v in overlay.values.items():
        if nid in graph.nodes:
            out[nid] = dict(v)
            continue
        d = graph.represented_by.get(nid)
        if d is not None and d in graph.nodes:
            inner.setdefault(d, []).append((nid, v))
    for d, items in inner.items():
        mine = out.get(d)
        if overlay.kind == "profile":
            # the compiled path runs fusions inline: their members' time is the fusion's
            agg = mine or {"self_ms": 0.0, "total_ms": 0.0, "percent": 0.0}
            for _, v in items:
                for k in ("self_ms", "total_ms", "percent"):
                    agg[k] = round(agg.get(k, 0.0) + (v.get(k) or 0.0), 6)
            agg["fused_instructions_timed"] = len(items)
            out[d] = agg
            continue
        if mine is None:
            mine = out[d] = {}
            if overlay.kind == "stats":
                mine.update({"status": "finite", "nonfinite": 0})
        for nid, v in items:
            if overlay.kind == "stats":
                if v.get("nonfinite"):
                    mine["fused_nonfinite"] = mine.get("fused_nonfinite", 0) + v["nonfinite"]
                    if mine.get("status") == "finite":
                        mine["status"] = "non-finite inside"
                if v.get("first_nonfinite"):
                    mine["first_nonfinite"] = 1
                    mine["status"] = "first non-finite"
                    mine["first_nonfinite_inside"] = nid
            elif overlay.kind == "diff":
                if v.get("first_difference"):
                    mine["first_difference"] = 1
                    mine["status"] = "first difference"
                    mine["first_difference_inside"] = nid
                elif v.get("diverges_here"):
                    mine["diverges_here"] = 1
                    mine.setdefault("diverges_inside", nid)
                    if mine.get("status") != "first difference":
                        mine["status"] = "diverges inside"
                if v.get("status") == "differ" and mine.get("status") in (None, "agree", "skipped"):
                    mine["status"] = "differ inside"
                for k in ("max_abs_diff", "max_rel_diff"):
                    if k in v:
                        mine[k] = max(mine.get(k, 0.0), v[k])
    return out


# colours: light fills so that black text stays readable
NEUTRAL = "#f2f2f2"
_RED, _DARK_RED = "#f4a3a3", "#e0301e"
_GREEN, _GREY = "#c9ecc3", "#dddddd"
_SCALE = ["#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#f16913"]   # low -> high


def style(values: dict[str, dict], overlay: Overlay) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(node id -> fill colour, legend rows (colour, text)) for the projected VALUES of OVERLAY."""
    fills: dict[str, str] = {}
    legend: list[tuple[str, str]] = []
    if overlay.kind == "stats" and overlay.primary == "nonfinite":
        for nid, v in values.items():
            if v.get("first_nonfinite"):
                fills[nid] = _DARK_RED
            elif v.get("nonfinite") or v.get("fused_nonfinite"):
                fills[nid] = _RED
            else:
                fills[nid] = _GREEN
        legend = [(_DARK_RED, "first non-finite value"), (_RED, "NaN or Inf in its value"),
                  (_GREEN, "finite"), (NEUTRAL, "not dumped")]
        return fills, legend
    if overlay.kind == "diff":
        scale = _scaled(values, "max_rel_diff", log=True)
        for nid, v in values.items():
            st = v.get("status", "")
            if v.get("first_difference") or v.get("diverges_here"):
                fills[nid] = _DARK_RED
            elif st.startswith("differ"):
                fills[nid] = scale.get(nid, _RED) if st == "differ" else _RED
            elif st == "agree":
                fills[nid] = _GREEN
            else:
                fills[nid] = _GREY
        legend = [(_DARK_RED, "differs while its operands agree (first difference: thick border)"), (_SCALE[-1], "differ (darker: larger relative difference)"),
                  (_GREEN, "agree"), (_GREY, "skipped"), (NEUTRAL, "not compared")]
        return fills, legend
    metric = overlay.primary
    log = overlay.kind == "stats"
    fills = _scaled(values, metric, log=log)
    lo, hi = _range(values, metric)
    unit = " ms" if metric.endswith("_ms") else ""
    if lo is not None:
        legend = [(_SCALE[0], f"{metric} {_fmt(lo)}{unit}"), (_SCALE[-1], f"{metric} {_fmt(hi)}{unit}"
                                                               + (" (log scale)" if log else "")),
                  (NEUTRAL, "no value")]
    return fills, legend


def _range(values, metric):
    xs = [v[metric] for v in values.values() if isinstance(v.get(metric), (int, float))]
    return (min(xs), max(xs)) if xs else (None, None)


def _scaled(values, metric, log: bool) -> dict[str, str]:
    lo, hi = _range(values, metric)
    out = {}
    if lo is None:
        return out

    def f(x):
        return math.log10(1.0 + abs(x)) if log else x
    a, b = f(lo), f(hi)
    for nid, v in values.items():
        x = v.get(metric)
        if not isinstance(x, (int, float)):
            continue
        t = 0.0 if b <= a else (f(x) - a) / (b - a)
        out[nid] = _SCALE[min(len(_SCALE) - 1, int(t * len(_SCALE)))]
    return out


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def format_value(x) -> str:
    """A value as details panels show it."""
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)
