"""Every module XLA GPU (JAX 0.11.2, an H200) dumped reads and checks clean, text and proto alike,
and a proto reads as the same module as its text twin.

The files: ../shared/gpu/dumps (a whole --xla_dump_to directory), ../shared/gpu/passes (a
pass-by-pass dump) and the cases' texts before and after optimization, when the shared folder is there; and always the small copy of a few of them
committed under samples/gpu/dumps/protos/.  Only modules are checked here: a .txt is a module when
it starts with `HloModule` (the others are XLA's reports: buffer assignments, thunk sequences,
live ranges, the priority-fusion log); the dump directory as a whole is another test's.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hlo_cli.checker import check_module
from hlo_cli.parser import parse
from hlo_cli.sources import read_modules

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "samples" / "gpu" / "dumps" / "protos"
SHARED = ROOT.parent / "shared" / "gpu"                   # ../shared/gpu beside the checkout
SHARED_DIRS = [SHARED / "dumps", SHARED / "passes"]
CASE_DIRS = [SHARED / "cases", SHARED / "cases_cublas"]          # NAME.pre.hlo / NAME.post.hlo
# XLA's report files among the .txt files of a GPU dump: not modules
REPORTS = re.compile(r"buffer-assignment|live-range|memory-usage-report|thunk_sequence|thunk_metadata"
                     r"|priority_fusion_dump")


def _is_module_text(path: Path) -> bool:
    with path.open(errors="replace") as f:
        for line in f:
            if line.strip():
                return line.lstrip().startswith("HloModule")
    return False


def _module_files(folder: Path) -> list[Path]:
    out = sorted(folder.glob("*.hlo.pb"))
    out += [p for p in sorted(folder.glob("*.txt")) if _is_module_text(p)]
    return out


def _shared_files() -> list[Path]:
    return ([p for d in SHARED_DIRS if d.is_dir() for p in _module_files(d)]
            + [p for d in CASE_DIRS if d.is_dir() for p in sorted(d.glob("*.hlo"))])


def _read_and_check(path: Path):
    mods = read_modules(str(path)).modules
    assert len(mods) == 1, path
    src = mods[0]
    module = parse(src.text, src.file)
    errors = [d for d in check_module(module, src.text) if d.severity == "error"]
    assert not errors, f"{path.name}: " + "; ".join(d.format() for d in errors[:3])
    return module


def _same_module(a, b) -> str | None:
    """None when the modules hold the same computations and instructions (each computation's
    instructions compared by name, not by order: XLA's text prints them in post order, its proto in
    creation order; a backend_config compared as JSON: the proto re-serializes it); module
    attributes are the module config's, which a proto does not hold."""
    ca = {c.name: c for c in a.computations}
    cb = {c.name: c for c in b.computations}
    if set(ca) != set(cb):
        return f"computations differ: {sorted(set(ca) ^ set(cb))[:5]}"
    for name, x in ca.items():
        y = cb[name]
        gx, gy = _gte_names(x), _gte_names(y)
        if (gx(x.root), x.is_entry) != (gy(y.root), y.is_entry):
            return f"{name}: root or entry differ"
        ix = {i.name: i for i in x.instructions if i.opcode != "get-tuple-element"}
        iy = {i.name: i for i in y.instructions if i.opcode != "get-tuple-element"}
        if set(ix) != set(iy):
            return f"{name}: instructions differ: {sorted(set(ix) ^ set(iy))[:5]}"
        for iname, i in ix.items():
            j = iy[iname]
            if tuple(map(gx, i.operands)) != tuple(map(gy, j.operands)):
                return f"{name}/{iname}: operands: {i.operands} vs {j.operands}"
            for f in ("opcode", "shape", "literal", "parameter_number"):
                if getattr(i, f) != getattr(j, f):
                    return f"{name}/{iname}: {f}: {getattr(i, f)!r} vs {getattr(j, f)!r}"
            for k in sorted(set(i.attrs) | set(j.attrs)):
                u, v = i.attrs.get(k), j.attrs.get(k)
                if k == "backend_config" and u is not None and v is not None:
                    try:
                        u, v = json.loads(u.text), json.loads(v.text)
                    except (ValueError, AttributeError):
                        pass
                if u != v:
                    return f"{name}/{iname}: attribute {k}: {u!r} vs {v!r}"
    return None


def _gte_names(comp):
    """name -> the name, or (tuple, index) for a get-tuple-element: the newest XLA prints a tuple
    element as an operand `%t#1` where its proto holds a get-tuple-element instruction (the parser
    makes one of its own for the operand, named differently)."""
    by = {i.name: i for i in comp.instructions}

    def canon(n):
        i = by.get(n)
        if i is not None and i.opcode == "get-tuple-element":
            return (canon(i.operands[0]), int(i.attrs["index"]))
        return n
    return canon


# ----------------------------------------------------------------------------- committed copies

def test_committed_copies_are_there():
    files = _module_files(COMMITTED)
    assert len([p for p in files if p.name.endswith(".hlo.pb")]) >= 2
    assert len([p for p in files if p.suffix == ".txt"]) >= 3


@pytest.mark.parametrize("path", _module_files(COMMITTED), ids=lambda p: p.name)
def test_committed_gpu_module_reads_and_checks(path):
    _read_and_check(path)


@pytest.mark.parametrize("pb", sorted(COMMITTED.glob("*.hlo.pb")), ids=lambda p: p.name)
def test_committed_gpu_proto_is_its_text(pb):
    twin = pb.with_name(pb.name[:-len(".hlo.pb")] + ".txt")
    assert _same_module(_read_and_check(pb), _read_and_check(twin)) is None


def test_committed_protos_hold_the_newest_fields():
    """The copies keep what they were committed for: the compare orders of JAX 0.11.2's protos
    (field 102), and a convolution carrying its field 101 (empty: read as absent)."""
    from hlo_cli.sources.proto_schema import messages
    orders, conv101 = set(), False
    for pb in COMMITTED.glob("*.hlo.pb"):
        data = pb.read_bytes()
        conv101 |= b"\xaa\x06\x00" in data            # field 101, length-delimited, empty
        m = messages()["HloProto"]()
        m.ParseFromString(data)
        orders |= {i.comparison_order for c in m.hlo_module.computations for i in c.instructions}
    assert {"TOTAL", "PARTIAL"} <= orders and conv101


# ----------------------------------------------------------------------------- the shared dumps

@pytest.mark.slow
def test_every_shared_gpu_module_reads_and_checks():
    files = _shared_files()
    if not files:
        pytest.skip("../shared/gpu is absent (the H200's dumps)")
    failures = []
    for path in files:
        try:
            _read_and_check(path)
        except AssertionError as e:
            failures.append(str(e)[:300])
    assert not failures, f"{len(failures)} of {len(files)}:\n" + "\n".join(failures)


@pytest.mark.slow
def test_every_shared_gpu_proto_is_its_text():
    protos = [p for d in SHARED_DIRS if d.is_dir() for p in sorted(d.glob("*.hlo.pb"))]
    if not protos:
        pytest.skip("../shared/gpu is absent (the H200's dumps)")
    for pb in protos:
        twin = pb.with_name(pb.name[:-len(".hlo.pb")] + ".txt")
        if twin.exists():
            assert _same_module(_read_and_check(pb), _read_and_check(twin)) is None, pb.name


def test_shared_non_module_texts_are_reports():
    """No module hides among the files this test leaves out: every other .txt is a report."""
    others = [p for d in SHARED_DIRS if d.is_dir() for p in sorted(d.glob("*.txt")) if not _is_module_text(p)]
    if not any(d.is_dir() for d in SHARED_DIRS):
        pytest.skip("../shared/gpu is absent (the H200's dumps)")
    assert [p.name for p in others if not REPORTS.search(p.name)] == []
