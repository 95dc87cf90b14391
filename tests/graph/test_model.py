"""The graph model (hlo_cli.graph.model) on samples: nodes, nesting, edges, filters, size."""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.graph import GraphError, build_graph, node_ids
from hlo_cli.parser import parse
from hlo_cli.sources import load

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DATA = Path(__file__).parent / "data"


def _module(rel: str):
    return load(str(SAMPLES / rel))[0]


def test_while_body_and_condition_nest_in_the_entry():
    g = build_graph(_module("loops/f8_gemm_loop.hlo"))
    assert g.root_group == "main.4" and g.groups["main.4"].kind == "entry"
    body, cond = g.groups["region_0.2"], g.groups["region_1.3"]
    assert (body.kind, body.parent, body.callers) == ("while_body", "main.4", ["while.5"])
    assert (cond.kind, cond.parent, cond.callers) == ("while_condition", "main.4", ["while.5"])
    assert body.label == "while.5 body: region_0.2"
    # the call inside the body nests in the body
    call = g.groups["closed_call.1"]
    assert (call.kind, call.parent) == ("call", "region_0.2")
    assert set(g.groups["main.4"].children) == {"region_0.2", "region_1.3"}
    # every node sits in the group of its computation
    for n in g.nodes.values():
        assert n.id in g.groups[n.group].nodes and n.group == n.computation
    assert g.group_path("closed_call.1") == ["main.4", "region_0.2", "closed_call.1"]


def test_edges_carry_shapes_tuple_indices_and_call_links():
    g = build_graph(_module("loops/f8_gemm_loop.hlo"))
    by = {(e.source, e.target, e.kind): e for e in g.edges}
    gte = by[("while.5", "while.7", "data")]
    assert (gte.tuple_index, gte.shape, gte.label) == (1, "bf16[64,48]", "#1 bf16[64,48]")
    assert by[("a.1", "while.4", "data")].shape == "f8e5m2[64,32]"
    # the loop's operand goes into the body's and the condition's parameter; their roots come back
    p = by[("while.4", "arg_tuple.1", "param")]
    assert p.via == "while.5" and p.shape.startswith("(s32[], bf16[64,48]")
    assert ("while.4", "arg_tuple.3", "param") in by
    assert by[("tuple.1", "while.5", "result")].via == "while.5"
    assert by[("lt.1", "while.5", "result")].shape == "pred[]"
    # a call's operands go to the callee's parameters by number
    assert by[("get-tuple-element.6", "Arg_0.1", "param")].operand_index == 0
    assert by[("get-tuple-element.5", "Arg_2.1", "param")].operand_index == 2


def test_scalar_constants_fold_into_their_users():
    m = _module("loops/f8_gemm_loop.hlo")
    g = build_graph(m)
    assert "constant.5" not in g.nodes                  # s32[] constant(20) in the condition
    assert g.nodes["lt.1"].inline_operands == {1: "20"}
    g2 = build_graph(m, fold_constants=False)
    assert "constant.5" in g2.nodes and not g2.nodes["lt.1"].inline_operands
    assert any(e.source == "constant.5" and e.target == "lt.1" for e in g2.edges)


def test_node_details_from_metadata_and_text():
    m = _module("jax/attention.opt.hlo")
    g = build_graph(m)
    n = next(n for n in g.nodes.values() if n.opcode == "fusion" and n.source)
    assert n.source.startswith("scripts/gen_samples.py:") and n.op_name
    assert n.location.startswith(str(SAMPLES / "jax/attention.opt.hlo") + ":") or \
        n.location.split(":")[0].endswith("attention.opt.hlo")
    assert any(n.is_root for n in g.nodes.values())


def test_fusions_collapsed_by_default_expanded_on_request():
    m = _module("jax/attention.opt.hlo")
    g = build_graph(m)
    fusions = [n for n in g.nodes.values() if n.opcode == "fusion"]
    assert fusions and all(n.collapsed for n in fusions)
    f = next(n for n in fusions if n.name == "add_rsqrt_fusion")
    assert f.fusion_kind == "kLoop" and f.fused_size > 3 and f.fused_computation in m.computation_map
    assert sum(f.fused_opcodes.values()) == f.fused_size
    assert len(g.groups) == 1
    # a fused instruction is represented by its fusion's node
    inner = next(i for i in m.computation_map[f.fused_computation].instructions
                 if i.opcode not in ("parameter", "constant"))
    assert g.node_of(f.fused_computation, inner.name) == f.id
    ge = build_graph(m, expand_fusions=True)
    grp = ge.groups[f.fused_computation]
    assert (grp.kind, grp.parent, grp.callers) == ("fusion", "main.7", [f.id])
    assert not ge.nodes[f.id].collapsed
    assert ge.node_of(f.fused_computation, inner.name) == node_ids(m)[(f.fused_computation, inner.name)]
    assert len(ge.nodes) > len(g.nodes)


def test_reducers_are_summarised_not_drawn():
    g = build_graph(parse((DATA / "nan_in_fusion.hlo").read_text(), "nan_in_fusion.hlo"))
    assert "add_f32" not in g.groups and "s" not in g.nodes
    assert g.nodes["r"].applies == ["to_apply: add_f32 = add"]


def test_conditional_branches_are_groups():
    m = _module("jax/cond_switch.hlo")
    g = build_graph(m)
    branches = [gr for gr in g.groups.values() if gr.kind == "branch"]
    assert len(branches) >= 2
    cond = next(i for _, i in m.instructions() if i.opcode == "conditional")
    nid = node_ids(m)
    ids = {gr.id for gr in branches if cond.name in [g.nodes[c].name for c in gr.callers]}
    assert len(ids) >= 2
    # branch k takes operand k+1
    for e in g.edges:
        if e.kind == "param" and e.via == nid[(next(c.name for c, i in m.instructions() if i is cond), cond.name)]:
            assert e.source in g.nodes


def test_control_edges():
    g = build_graph(_module("ops/add.common_attributes.hlo"))
    ctl = [e for e in g.edges if e.kind == "control"]
    assert ctl and all(e.label == "" for e in ctl)


def test_computation_filter():
    m = _module("loops/f8_gemm_loop.hlo")
    g = build_graph(m, computation="region_0.2")
    assert g.root_group == "region_0.2" and g.groups["region_0.2"].kind == "computation"
    assert set(g.groups) == {"region_0.2", "closed_call.1"}
    assert "while.5" not in g.nodes and "add.3" in g.nodes
    with pytest.raises(GraphError, match="no computation named 'region_0.3'.*did you mean"):
        build_graph(m, computation="region_0.3")


def test_around_keeps_the_neighbourhood():
    m = _module("loops/f8_gemm_loop.hlo")
    full = build_graph(m)
    g = build_graph(m, around="dot_general.1", depth=1)
    assert set(g.nodes) == {"dot_general.1", "Arg_0.1", "Arg_1.1", "add.1"}
    assert g.options["focus"] == "dot_general.1" and g.omitted_nodes == len(full.nodes) - 4
    assert g.nodes["Arg_0.1"].hidden_inputs == 1        # the body's gte passing it in
    assert g.nodes["add.1"].hidden_inputs == 1 and g.nodes["add.1"].hidden_outputs == 1
    # the groups on the way down stay, others go
    assert set(g.groups) == {"main.4", "region_0.2", "closed_call.1"}
    assert g.groups["main.4"].children == ["region_0.2"]
    g0 = build_graph(m, around="dot_general.1", depth=0)
    assert set(g0.nodes) == {"dot_general.1"}
    # depth grows the neighbourhood through parameters and results of calls
    g3 = build_graph(m, around="dot_general.1", depth=3)
    assert {"get-tuple-element.6", "closed_call.1"} <= set(g3.nodes)


def test_around_a_scalar_constant_draws_it():
    g = build_graph(_module("loops/f8_gemm_loop.hlo"), around="constant.5", depth=1)
    assert set(g.nodes) == {"constant.5", "lt.1"} and not g.nodes["lt.1"].inline_operands


def test_around_inside_a_collapsed_fusion_opens_it():
    m = _module("jax/attention.opt.hlo")
    f = next(i for i in m.entry_computation.instructions if i.name == "add_rsqrt_fusion")
    fused = m.computation_map[f.attrs["calls"].name]
    inner = next(i for i in fused.instructions if i.opcode == "rsqrt")
    g = build_graph(m, around=inner.name, depth=2)
    assert inner.name in g.nodes and fused.name in g.groups
    assert g.groups[fused.name].kind == "fusion"


def test_around_errors():
    m = _module("loops/f8_gemm_loop.hlo")
    with pytest.raises(GraphError, match="no instruction of that name.*did you mean"):
        build_graph(m, around="dot_general.2")
    dup = parse("HloModule d\n\nc1 {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n\n"
                "ENTRY e {\n  a = f32[] parameter(0)\n  ROOT n = f32[] call(a), to_apply=c1\n}\n")
    with pytest.raises(GraphError, match="2 computations have an instruction of that name"):
        build_graph(dup, around="n")
    g = build_graph(dup, around="c1/n", depth=1)
    assert "c1/n" in g.nodes and g.nodes["c1/n"].name == "n"
    ids = node_ids(dup)
    assert ids[("c1", "n")] == "c1/n" and ids[("e", "n")] == "e/n"


def test_a_reducer_named_by_around_is_drawn_on_its_own():
    m = parse((DATA / "nan_in_fusion.hlo").read_text(), "nan_in_fusion.hlo")
    g = build_graph(m, around="s", depth=1)
    assert g.root_group == "add_f32" and set(g.nodes) == {"s", "a", "add_f32/b"}   # b: also in fused_log


@pytest.mark.parametrize("rel,budget", [("convnets/resnet_tiny.opt.hlo", 400),
                                        ("tensorflow/stateless_rng.opt.hlo", 60),
                                        ("convnets/mobilenet_v2_tiny.opt.hlo", 450)])
def test_large_modules_stay_under_a_node_budget(rel, budget):
    m = _module(rel)
    total = sum(len(c.instructions) for c in m.computations)
    g = build_graph(m)
    assert total > 3000 and len(g.nodes) <= budget
    assert not g.warnings


def test_size_warning_says_how_to_narrow():
    from hlo_cli.graph import model
    m = _module("convnets/resnet_tiny.opt.hlo")
    old = model.WARN_NODES
    model.WARN_NODES = 100
    try:
        g = build_graph(m)
    finally:
        model.WARN_NODES = old
    assert g.warnings and "--computation" in g.warnings[0] and "--around" in g.warnings[0]
