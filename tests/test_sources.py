"""hlo_cli.sources: files with several modules (XLA lit tests, PyTorch/XLA saved graphs, pasted dumps),
directories of dumps recognized by content, choosing a module, and positions kept from the file."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloInputError, HloSyntaxError
from hlo_cli.sources import (CONCATENATED, LIT, SAVED_GRAPHS, SINGLE, expand, holds_module_text, parse_module,
                             read_modules, split_source, split_text)
from hlo_cli.sources import files as files_mod
from hlo_cli.sources.split import module_text

ROOT = Path(__file__).resolve().parent.parent
MULTI = ROOT / "samples" / "multi"


def _module(name: str, op: str = "negate", header: bool = True) -> str:
    head = f"HloModule {name}\n\n" if header else ""
    return head + f"ENTRY main {{\n  x = f32[3] parameter(0)\n  ROOT y = f32[3] {op}(x)\n}}\n"


# ----------------------------------------------------------------------------- layouts

def test_one_module_is_the_whole_text():
    text = "// a comment\n" + _module("m")
    sp = split_text(text)
    assert sp.layout == SINGLE and len(sp.regions) == 1
    r = sp.regions[0]
    assert (r.start, r.end, r.line, r.name) == (0, len(text), 2, "m")
    assert module_text(text, r) is text


def test_a_module_without_header_is_one_module():
    sp = split_text(_module("m", header=False))
    assert sp.layout == SINGLE and sp.regions[0].name is None and sp.regions[0].line == 1


def test_lit_test_modules_and_their_lines():
    text = MULTI.joinpath("lit_three_modules.hlo").read_text()
    fm = read_modules(str(MULTI / "lit_three_modules.hlo"))
    assert fm.layout == LIT
    assert [m.name for m in fm.modules] == ["add_vectors", "scale_and_shift", "pick_max"]
    lines = text.split("\n")
    for m in fm.modules:
        # the module's line is its `HloModule` line in the file
        assert lines[m.line - 1].startswith(f"HloModule {m.name}")
        assert m.count == 3 and m.label.endswith(f"#{m.index} {m.name}")
        # everything before the module is blanked, the rest is the file's text
        mt = m.text.split("\n")
        before = text.count("\n", 0, m.region.start)
        assert all(x == "" for x in mt[:before])
        assert mt[before:] == m.own_text.split("\n")
        assert "// -----" not in m.own_text.split("\n")


def test_lit_separator_with_crlf_and_empty_chunks():
    text = ("// -----\r\n" + _module("a") + "// -----\r\n\r\n// only a comment here\r\n// -----  \r\n"
            + _module("b") + "// -----\r\n")
    fm = split_source(text, "t.hlo")
    assert fm.layout == LIT
    assert [m.name for m in fm.modules] == ["a", "b"]        # chunks without content are not modules


def test_only_comments_between_separators_is_left_to_the_parser():
    sp = split_text("// x\n// -----\n// y\n")
    assert sp.layout == SINGLE and len(sp.regions) == 1


def test_pasted_dumps_split_at_each_header():
    text = "// from two dumps\n" + _module("first") + "\n" + _module("second", "exponential")
    fm = split_source(text, "t.hlo")
    assert fm.layout == CONCATENATED
    assert [m.name for m in fm.modules] == ["first", "second"]
    assert fm.modules[0].own_text.startswith("// from two dumps")       # leading text goes with the first
    assert [parse_module(m, use_cache=False).name for m in fm.modules] == ["first", "second"]


def test_saved_graphs_keep_only_hlo_graphs():
    fm = read_modules(str(MULTI / "saved_graphs.txt"))
    assert fm.layout == SAVED_GRAPHS
    assert [m.name for m in fm.modules] == ["IrToHlo.6", "IrToHlo.11"]
    assert [g.line for g in fm.skipped] == [8]
    assert "lazy-tensor IR" in fm.skipped[0].kind
    for m in fm.modules:
        assert "## END_GRAPH" not in m.own_text and "Hashes" not in m.own_text
        module = parse_module(m, use_cache=False)
        assert module.name == m.name


@pytest.mark.parametrize("body,kind", [
    ("IR {\n  %0 = f32[] prim::Constant(), xla_shape=f32[]\n}\n", "lazy-tensor IR"),
    ("digraph G {\n  node0 [label=\"x\"]\n}\n", "dot"),
    ("module @IrToHlo.3 attributes {mhlo.cross_program_prefetches = []} {\n}\n", "StableHLO"),
    ("", "empty"),
])
def test_saved_graph_file_without_hlo_is_unusable(body, kind):
    text = "[SyncTensorsGraph]\nTensorsGraphInfo:\n  f (a.py:1)\n\n## BEGIN_GRAPH\n" + body + "## END_GRAPH\n\n"
    with pytest.raises(HloInputError) as e:
        split_source(text, "g.txt")
    d = e.value.diagnostics[0]
    assert d.code == "E080" and d.file == "g.txt"
    assert kind in d.message and "XLA_SAVE_TENSORS_FMT=hlo" in d.message
    assert e.value.exit_code == 2


def test_saved_graph_without_end_runs_to_the_next_begin():
    text = ("## BEGIN_GRAPH\n" + _module("a") + "## BEGIN_GRAPH\n" + _module("b") + "## END_GRAPH\n"
            + "## BEGIN_GRAPH\n" + _module("c"))
    fm = split_source(text, "g.txt")
    assert [m.name for m in fm.modules] == ["a", "b", "c"]


def test_saved_graph_hash_line_is_not_part_of_the_module():
    # torch_xla 2.9 writes "Graph Hash: <hex>" after the module, before ## END_GRAPH
    text = ("[ScheduleSyncTensorsGraph]\n\n## BEGIN_GRAPH\n" + _module("a") + "\n\nGraph Hash: 609fbf26\n\n"
            "## END_GRAPH\n\n## BEGIN_GRAPH\n" + _module("b") + "Graph Hash: 0a1b\n## END_GRAPH\n")
    fm = split_source(text, "g.txt")
    assert [m.name for m in fm.modules] == ["a", "b"]
    for m in fm.modules:
        assert "Graph Hash" not in m.own_text
        assert parse_module(m, use_cache=False).name == m.name


def test_real_torch_xla_saved_graphs_file_checks_clean():
    fm = read_modules(str(MULTI.parent / "torch_xla" / "mlp_train_step.graphs.txt"))
    assert fm.layout == SAVED_GRAPHS and len(fm.modules) == 2
    for m in fm.modules:
        parse_module(m, use_cache=False)


# ----------------------------------------------------------------------------- positions and laws

_CHUNK = st.tuples(st.sampled_from(["negate", "exponential", "abs"]),
                   st.lists(st.sampled_from(["// CHECK: x", "", "  ", "// RUN: hlo-opt %s"]), max_size=3),
                   st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(_CHUNK, min_size=1, max_size=5), st.sampled_from(["\n", "\r\n"]))
def test_lit_split_law(chunks, nl):
    """Modules come back in order with their names; their parts of the file are disjoint and ordered;
    each module's text is the file's lines with the ones before it blanked; every instruction is
    located at its line in the file."""
    parts = []
    for k, (op, comments, trailing_blank) in enumerate(chunks):
        parts.append("\n".join(comments + [_module(f"m{k}", op)]) + ("\n" if trailing_blank else ""))
    text = "\n// -----\n\n".join(parts).replace("\n", nl)
    fm = split_source(text, "law.hlo")
    assert [m.name for m in fm.modules] == [f"m{k}" for k in range(len(chunks))]
    assert fm.layout == (SINGLE if len(chunks) == 1 else LIT)
    ends = [0]
    for m in fm.modules:
        assert m.region.start >= ends[-1]
        ends.append(m.region.end)
    file_lines = text.split("\n")
    for m in fm.modules:
        module = parse_module(m, use_cache=False)
        for _, inst in module.instructions():
            assert re.match(rf"\s*(ROOT )?{re.escape(inst.name)} =", file_lines[inst.loc.line - 1])
        mt = m.text.splitlines()
        first = text.count("\n", 0, m.region.start)
        assert mt[:first] == [""] * first and mt[first:] == text.splitlines()[first:len(mt)]


def test_syntax_error_in_a_later_module_is_located_in_the_file():
    text = _module("a") + "// -----\n" + _module("b", "frobnicate")
    fm = split_source(text, "t.hlo")
    with pytest.raises(HloSyntaxError) as e:
        parse_module(fm.modules[1], use_cache=False)
    d = e.value.diagnostics[0]
    line = text.split("\n").index("  ROOT y = f32[3] frobnicate(x)") + 1
    assert (d.file, d.line, d.column) == ("t.hlo", line, 19)
    assert "frobnicate" in d.message and "frobnicate(x)" in d.source_line


def test_each_module_is_cached_on_its_own(tmp_path, monkeypatch):
    from hlo_cli.sources.cache import cache_info
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))
    fm = read_modules(str(MULTI / "lit_three_modules.hlo"))
    first = [parse_module(m) for m in fm.modules]
    assert cache_info().entries == 3
    again = [parse_module(m) for m in fm.modules]
    assert cache_info().entries == 3
    assert [m.name for m in again] == [m.name for m in first]
    assert [[i.loc for _, i in m.instructions()] for m in again] == [[i.loc for _, i in m.instructions()]
                                                                      for m in first]


# ----------------------------------------------------------------------------- choosing a module

def test_select_by_index_and_by_name():
    fm = read_modules(str(MULTI / "lit_three_modules.hlo"))
    assert fm.select("2").name == "pick_max"
    assert fm.select(" 0 ").name == "add_vectors"
    assert fm.select("scale_and_shift").index == 1


@pytest.mark.parametrize("which,code,fragment", [
    (None, "E081", "holds 3 HLO modules; choose one with --module N"),
    ("3", "E082", "no module #3; this file holds 3 modules"),
    ("-1", "E082", "no module #-1"),
    ("nope", "E082", "no module of this name"),
])
def test_select_errors_list_the_modules(which, code, fragment):
    fm = read_modules(str(MULTI / "lit_three_modules.hlo"))
    with pytest.raises(HloInputError) as e:
        fm.select(which)
    d = e.value.diagnostics[0]
    assert d.code == code and fragment in d.message
    assert "#0 add_vectors (line 6)" in d.message and "#2 pick_max (line 34)" in d.message
    assert e.value.exit_code == 2


def test_select_with_a_duplicate_name_asks_for_the_number():
    fm = split_source(_module("same") + "// -----\n" + _module("same"), "t.hlo")
    with pytest.raises(HloInputError, match="2 modules have this name"):
        fm.select("same")
    assert fm.select("1").index == 1


def test_a_single_module_needs_no_choice():
    fm = split_source(_module("only"), "t.hlo")
    assert fm.select(None).name == "only" and fm.select("only").index == 0 and fm.select("0").label == "t.hlo"


# ----------------------------------------------------------------------------- directories

def test_dump_directory_keeps_module_text_only():
    found, skipped = expand([str(MULTI / "dump")])
    assert [Path(f).name for f in found] == ["module_0002.jit__lambda.before_optimizations.txt",
                                             "module_0002.jit__lambda.cpu_after_optimizations.txt"]
    reasons = {Path(s.path).name.split(".", 2)[-1]: s.reason for s in skipped}
    assert set(reasons) == {"cpu_after_optimizations-buffer-assignment-values.txt",
                            "cpu_after_optimizations-buffer-assignment.txt",
                            "cpu_after_optimizations-live-range.txt",
                            "cpu_after_optimizations-memory-usage-report.txt", "debug_options"}
    # XLA's files are known by their names (sources.dumpdir.classify): what each is, and its kind
    assert reasons["cpu_after_optimizations-live-range.txt"] == "XLA's live ranges of the optimized module's buffers"
    assert reasons["debug_options"] == "the XLA flags that differ from their defaults"
    kinds = {Path(s.path).name.split(".", 2)[-1]: s.kind for s in skipped}
    assert kinds["debug_options"] == "config" and kinds["cpu_after_optimizations-buffer-assignment.txt"] == "report"


def test_directory_by_content_not_by_name(tmp_path):
    (tmp_path / "a-buffer-assignment.txt").write_text(_module("disguised"))     # a module, whatever its name
    (tmp_path / "module.txt").write_text("BufferAssignment:\nallocation 0: size 4, parameter 0\n")
    (tmp_path / "headerless.hlo").write_text(_module("x", header=False))        # *.hlo says HLO by itself
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "m.txt").write_text(_module("hidden"))
    found, skipped = expand([str(tmp_path)])
    assert sorted(Path(f).name for f in found) == ["a-buffer-assignment.txt", "headerless.hlo"]
    assert [Path(s.path).name for s in skipped] == ["module.txt"]


def test_empty_directory_and_plain_paths(tmp_path):
    found, skipped = expand([str(tmp_path), "-", "x.hlo"])
    assert found == [str(tmp_path), "-", "x.hlo"] and skipped == []


@pytest.mark.parametrize("block", [1, 2, 7, 9, 10, 11, 12, 64, 1 << 20])
def test_module_header_found_across_read_blocks(tmp_path, monkeypatch, block):
    monkeypatch.setattr(files_mod, "_SNIFF_BLOCK", block)
    p = tmp_path / "m.txt"
    for pad in range(12):
        p.write_text("x" * pad + "\n" + _module("late"))
        assert holds_module_text(p), pad
        p.write_text("x" * pad + "\nno HloModule here\n  HloModule indented\nHloModule\nHloModules x\n")
        assert not holds_module_text(p), pad
    p.write_text(_module("first"))
    assert holds_module_text(p)
    p.write_text("")
    assert not holds_module_text(p)


_LINES = st.sampled_from(["// -----", "## BEGIN_GRAPH", "## END_GRAPH", "HloModule m", "HloModule n, x=1",
                          "IR {", "}", "", "  ", "// c", "junk", "ENTRY e {", "  ROOT x = f32[] parameter(0)",
                          "#OUTPUT_SHARDING_BEGIN", "HloModule", " HloModule k", "// -----x"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, max_size=25), st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_any_text_splits_into_ordered_regions_or_says_why_not(lines, nl, final_newline):
    """Whatever the text, splitting gives ordered, disjoint regions inside it whose line is their
    `HloModule` line (when they have a name), or an input error saying there is no HLO graph."""
    text = nl.join(lines) + (nl if final_newline else "")
    try:
        fm = split_source(text, "f.txt")
    except HloInputError as e:
        assert e.diagnostics[0].code == "E080" and "## BEGIN_GRAPH" in text
        return
    assert fm.modules and all(m.count == len(fm.modules) for m in fm.modules)
    prev = 0
    file_lines = text.split("\n")
    for m in fm.modules:
        r = m.region
        assert prev <= r.start <= r.end <= len(text)
        prev = r.end
        if r.name is not None:
            assert file_lines[r.line - 1].startswith("HloModule " + r.name)
        assert m.text.endswith(m.own_text) and m.text.count("\n") == text.count("\n", 0, r.end)


def test_a_module_in_protobuf_text_format_is_named_as_such(tmp_path):
    # XLA's translate tests keep modules as HloModuleProto text; that is not HLO text (exit 2)
    text = ('# RUN: some-tool %s\n\nhlo_module {\n  name: "foo.5"\n  entry_computation_name: "main.5"\n'
            '  computations {\n    name: "main.5"\n  }\n}\n')
    with pytest.raises(HloInputError) as e:
        split_source(text, "p.hlo")
    d = e.value.diagnostics[0]
    assert (d.code, d.line, e.value.exit_code) == ("E083", 3, 2)
    assert "protobuf's text format" in d.message and "HloModuleProto" in d.message
    # HLO text that mentions such a word in a comment or a name is still HLO text
    fm = split_source("// hlo_module {\nHloModule m\nENTRY e {\n  ROOT c = f32[] constant(1)\n}\n", "m.hlo")
    assert [m.name for m in fm.modules] == ["m"]


def test_library_parse_file_and_parse_modules():
    import hlo_cli
    path = str(MULTI / "lit_three_modules.hlo")
    names = [m.name for m in hlo_cli.parse_modules(path, use_cache=False)]
    assert len(names) == 3
    assert hlo_cli.parse_file(path, module=1, use_cache=False).name == names[1]
    assert hlo_cli.parse_file(path, module=names[2], use_cache=False).name == names[2]
    with pytest.raises(hlo_cli.HloInputError) as e:
        hlo_cli.parse_file(path, use_cache=False)
    assert e.value.exit_code == 2 and names[0] in str(e.value)
