"""Shape rules of the collective family: all-reduce (+ -start / -done), all-gather (+ -start /
-done), reduce-scatter, all-to-all, ragged-all-to-all, collective-broadcast, collective-permute
(+ -start / -done), replica-id, partition-id.

Valid cases: every instruction of these opcodes in samples/{ops,syntax,jax} infers its declared
shape (layouts ignored), with the module header's replica_count / num_partitions in the context
(XLA's module config, 1 when absent).  Invalid cases: a table of (operands, instruction, expected
message fragment), written as small HLO modules; every message follows the house template
`<opcode>: <what> must <constraint>, got <actual> for <operand shapes>`.
"""
from __future__ import annotations


import pytest

from .rules_harness import S, TEMPLATE, RuleTests, context, opcode_of, samples  # noqa: F401

from hlo_cli.parser import parse
from hlo_cli.shapes import RULES, infer_shape
from hlo_cli.shapes.registry import RuleContext, ShapeRuleError, computation_shapes, context_for, operand_shapes


OPCODES = ("all-reduce", "all-reduce-start", "all-reduce-done", "all-gather", "all-gather-start", "all-gather-done",
           "reduce-scatter", "all-to-all", "ragged-all-to-all", "collective-broadcast", "collective-permute",
           "collective-permute-start", "collective-permute-done", "replica-id", "partition-id")

XLA_REJECTS: dict[str, str] = {}


# ----------------------------------------------------------------------------- harness


COMPS = {
    "add_f32": "add_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}",
    "vec_add": "vec_add {\n  a = f32[2] parameter(0)\n  b = f32[2] parameter(1)\n  ROOT r = f32[2] add(a, b)\n}",
}

_H = RuleTests(COMPS, XLA_REJECTS)
_context, _samples, _check_sample = context, samples, _H.check_sample
_module, infer, expect_error = _H.module, _H.infer, _H.expect_error

ADD = ["add_f32"]
R4 = ", replica_count=4"


# ----------------------------------------------------------------------------- valid cases

def test_every_opcode_has_a_rule():
    assert all(op in RULES for op in OPCODES)


@pytest.mark.parametrize("path", _samples(OPCODES), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_infer_their_declared_shape(path):
    assert _check_sample(path, OPCODES) > 0


@pytest.mark.parametrize("path", _samples(OPCODES), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_without_module_config(path):
    """The same, with a RuleContext that does not know replica_count / num_partitions (the
    registry's context_for today): the shard counts come from replica_groups or the declared shape."""
    module = parse(path.read_text(), str(path))
    comps = computation_shapes(module)
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode in OPCODES and inst.shape is not None:
                got = infer_shape(inst.opcode, operand_shapes(comp, inst), inst.attrs, context_for(module, inst, comps))
                assert got.without_layout() == inst.shape.without_layout(), inst.name


VALID = [
    # AllGather (operation semantics): two replicas holding [1.0, 2.5] and [3.0, 5.25] gather
    # along dimension 0 into [1.0, 2.5, 3.0, 5.25]: the gathered dimension times the group size
    (["f32[2]"], "f32[4] all-gather(p0), dimensions={0}, replica_groups={{0,1}}", [], ", replica_count=2", "f32[4]"),
    (["f32[2]"], "f32[4] all-gather(p0), dimensions={0}, replica_groups={}", [], ", replica_count=2", "f32[4]"),
    # replica_groups={{0,2},{1,3}}: groups of 2
    (["f32[3,5]"], "f32[3,10] all-gather(p0), dimensions={1}, replica_groups={{0,2},{1,3}}", [], R4, "f32[3,10]"),
    # channel_id without use_global_device_ids: the group spans every partition (2 x 2 = 4)
    (["f32[2]"], "f32[8] all-gather(p0), channel_id=1, dimensions={0}, replica_groups={{0,1}}", [],
     ", replica_count=2, num_partitions=2", "f32[8]"),
    # use_global_device_ids: flattened ids, iota groups [2,4]<=[8] are groups of 4
    (["f32[2,2]"], "f32[2,8] all-gather(p0), channel_id=1, dimensions={1}, replica_groups=[2,4]<=[8], "
     "use_global_device_ids=true", [], ", num_partitions=8", "f32[2,8]"),
    # groups of one device gather nothing (XLA would read any multiple off the declared shape)
    (["f32[8]"], "f32[8] all-gather(p0), dimensions={0}, replica_groups={{0},{1}}", [], ", replica_count=2", "f32[8]"),
    # variadic all-gather and the -start form
    (["f32[4]", "s32[2]"], "(f32[8], s32[4]) all-gather(p0, p1), dimensions={0}, replica_groups={{0,1}}", [],
     ", replica_count=2", "(f32[8], s32[4])"),
    (["f32[4,2]"], "(f32[4,2], f32[16,2]) all-gather-start(p0), dimensions={0}, replica_groups={{0,1,2,3}}", [], R4,
     "(f32[4,2], f32[16,2])"),
    # AllReduce: the operand's shape, a tuple for several operands
    (["f32[8]"], "f32[8] all-reduce(p0), replica_groups={{0,2},{1,3}}, to_apply=add_f32", ADD, R4, "f32[8]"),
    (["f32[8]", "f32[2,2]"], "(f32[8], f32[2,2]) all-reduce(p0, p1), replica_groups={}, to_apply=add_f32", ADD, R4,
     "(f32[8], f32[2,2])"),
    # all-reduce allows groups of different sizes
    (["f32[8]"], "f32[8] all-reduce(p0), replica_groups={{0,1,2},{3}}, to_apply=add_f32", ADD, R4, "f32[8]"),
    # ReduceScatter: the scattered dimension divided by the group size
    (["f32[8,2]"], "f32[2,2] reduce-scatter(p0), dimensions={0}, replica_groups={{0,1,2,3}}, to_apply=add_f32",
     ADD, R4, "f32[2,2]"),
    # dynamic dimensions: all-gather keeps the bound; XLA makes a scattered dynamic dimension unbounded
    (["f32[<=2,3]"], "f32[<=4,3] all-gather(p0), dimensions={0}, replica_groups={{0,1}}", [], ", replica_count=2",
     "f32[<=4,3]"),
    (["f32[<=8]"], "f32[?] reduce-scatter(p0), dimensions={0}, replica_groups={{0,1,2,3}}, to_apply=add_f32",
     ADD, R4, "f32[?]"),
    # AllToAll: the example f32[4,16] split along 1 in 4 parts; in HLO split and concat dimension are
    # the same, so the shape is kept
    (["f32[4,16]"], "f32[4,16] all-to-all(p0), dimensions={1}, replica_groups={{0,1,2,3}}", [], R4, "f32[4,16]"),
    (["f32[4]", "f32[4]"], "(f32[4], f32[4]) all-to-all(p0, p1), replica_groups={{0,1}}", [], ", replica_count=2",
     "(f32[4], f32[4])"),
    # CollectivePermute keeps the shape; the in-place form returns the output buffer
    (["f32[8]"], "f32[8] collective-permute(p0), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}", [], R4, "f32[8]"),
    (["f32[4,4]", "f32[8,4]", "(s32[], s32[])", "(s32[], s32[])"], "f32[8,4] collective-permute(p0, p1, p2, p3), "
     "source_target_pairs={{0,1},{1,0}}, slice_sizes={{4,4}}", [], ", replica_count=2", "f32[8,4]"),
    (["f32[8]"], "(f32[8], f32[8], u32[], u32[]) collective-permute-start(p0), source_target_pairs={{0,1},{1,0}}",
     [], ", replica_count=2", "(f32[8], f32[8], u32[], u32[])"),
    (["(f32[8], f32[8], u32[], u32[])"], "f32[8] collective-permute-done(p0)", [], "", "f32[8]"),
    ([], "u32[] replica-id()", [], R4, "u32[]"),
    ([], "u32[] partition-id()", [], R4, "u32[]"),
]


@pytest.mark.parametrize("operands, line, comps, header, expected", VALID)
def test_valid(operands, line, comps, header, expected):
    assert infer(operands, line, comps, header).without_layout() == S(expected).without_layout()


def test_shard_count_from_the_declared_shape_when_nothing_else_tells():
    """Empty replica_groups and an unknown replica count: like XLA, read the shard count off the
    declared result (and check it is a whole multiple)."""
    ctx = RuleContext("all-gather", S("f32[32]"))
    got = infer_shape("all-gather", [S("f32[8]")], {"dimensions": (0,)}, ctx)
    assert got.without_layout() == S("f32[32]").without_layout()
    with pytest.raises(ShapeRuleError) as info:
        infer_shape("all-gather", [S("f32[8]")], {"dimensions": (0,)}, RuleContext("all-gather", S("f32[12]")))
    assert "result dimension 0 must be a multiple of operand dimension 0 (8), got 12" in str(info.value)
    with pytest.raises(ShapeRuleError) as info:
        infer_shape("all-gather", [S("f32[8]")], {"dimensions": (0,)}, RuleContext("all-gather"))
    assert "the shard count must be known" in str(info.value) and TEMPLATE.match(str(info.value))


# ----------------------------------------------------------------------------- invalid cases

INVALID = [
    # --- all-reduce / all-reduce-start / -done
    ("all-reduce-replica-out-of-range", ["f32[8]"], "f32[8] all-reduce(p0), replica_groups={{0,5}}, to_apply=add_f32",
     ADD, "", "replica ids must be in [0, 2), got 5"),
    ("all-reduce-replica-repeated", ["f32[8]"], "f32[8] all-reduce(p0), replica_groups={{0,1},{1,2}}, "
     "to_apply=add_f32", ADD, "", "replica ids must appear in one replica group only once, got 1 repeated"),
    ("all-reduce-replica-count", ["f32[8]"], "f32[8] all-reduce(p0), replica_groups={{0,1}}, to_apply=add_f32",
     ADD, R4, "replica_groups must name all 4 replicas, got 2 ids"),
    ("all-reduce-global-ids-without-channel", ["f32[8]"], "f32[8] all-reduce(p0), replica_groups={{0,1}}, "
     "use_global_device_ids=true, to_apply=add_f32", ADD, "",
     "use_global_device_ids=true must come with a channel_id, got no channel_id"),
    ("all-reduce-flattened-without-groups", ["f32[8]"], "f32[8] all-reduce(p0), channel_id=1, replica_groups={}, "
     "use_global_device_ids=true, to_apply=add_f32", ADD, "",
     "replica_groups must be given with use_global_device_ids=true (flattened ids), got {}"),
    ("all-reduce-reducer-shape", ["f32[2]"], "f32[2] all-reduce(p0), replica_groups={}, to_apply=vec_add",
     ["vec_add"], "", "the result of to_apply must be a scalar, got f32[2]"),
    ("all-reduce-reducer-type", ["s32[8]"], "s32[8] all-reduce(p0), replica_groups={}, to_apply=add_f32", ADD, "",
     "the to_apply reduction must have the element type of operand 0 (s32), got f32[]"),
    ("all-reduce-start-tuple-operand", ["(f32[8])"], "(f32[8]) all-reduce-start(p0), replica_groups={}, "
     "to_apply=add_f32", ADD, "", "operand 0 must be an array, got (f32[8])"),
    # --- all-gather (the gathered dimension is multiplied by the group size)
    ("all-gather-group-size", ["f32[8]"], "f32[16] all-gather(p0), dimensions={0}, replica_groups={{0,1,2,3}}", [],
     R4, "result dimension 0 must be 8 x 4 = 32 (operand dimension 0 times the replica group size 4), got 16"),
    ("all-gather-replica-count", ["f32[8]"], "f32[16] all-gather(p0), dimensions={0}, replica_groups={}", [], R4,
     "result dimension 0 must be 8 x 4 = 32"),
    ("all-gather-cross-partition", ["f32[2]"], "f32[4] all-gather(p0), channel_id=1, dimensions={0}, "
     "replica_groups={{0,1}}", [], ", replica_count=2, num_partitions=2", "result dimension 0 must be 2 x 4 = 8"),
    ("all-gather-two-dimensions", ["f32[8,2]"], "f32[32,8] all-gather(p0), dimensions={0,1}, "
     "replica_groups={{0,1,2,3}}", [], R4, "dimensions must name exactly one dimension, got {0,1}"),
    ("all-gather-dimension-range", ["f32[8]"], "f32[32] all-gather(p0), dimensions={1}, replica_groups={{0,1,2,3}}",
     [], R4, "the dimension must be smaller than the rank of operand 0 (1), got 1"),
    ("all-gather-uneven-groups", ["f32[8]"], "f32[24] all-gather(p0), dimensions={0}, replica_groups={{0,1,2},{3}}",
     [], R4, "replica groups must all have the same size, got sizes 3,1"),
    ("all-gather-empty-group", ["f32[8]"], "f32[8] all-gather(p0), dimensions={0}, replica_groups={{},{0}}", [], "",
     "replica groups must not be empty"),
    ("all-gather-start-group-size", ["f32[8]"], "(f32[8], f32[16]) all-gather-start(p0), dimensions={0}, "
     "replica_groups={{0,1,2,3}}", [], R4, "result dimension 0 must be 8 x 4 = 32"),
    ("all-gather-done-operand", ["f32[8]"], "f32[8] all-gather-done(p0)", [], "",
     "operand 0 must be an all-gather-start value (operands, results), got f32[8]"),
    # --- reduce-scatter (the scattered dimension is divided by the group size)
    ("reduce-scatter-divisibility", ["f32[6]"], "f32[1] reduce-scatter(p0), dimensions={0}, "
     "replica_groups={{0,1,2,3}}, to_apply=add_f32", ADD, R4,
     "dimension 0 of operand 0 must be divisible by the shard count 4, got 6"),
    ("reduce-scatter-dimension-range", ["f32[8]"], "f32[2] reduce-scatter(p0), dimensions={1}, "
     "replica_groups={{0,1,2,3}}, to_apply=add_f32", ADD, R4,
     "the dimension must be smaller than the rank of operand 0 (1), got 1"),
    ("reduce-scatter-reducer-arity", ["f32[8]"], "f32[2] reduce-scatter(p0), dimensions={0}, "
     "replica_groups={{0,1,2,3}}, to_apply=neg_f32", ["neg_f32"], R4, "to_apply must take 2 parameters, got 1"),
    # --- all-to-all (operation semantics: the split dimension size divides by split_count)
    ("all-to-all-split", ["f32[4,6]"], "f32[4,6] all-to-all(p0), dimensions={1}, replica_groups={{0,1,2,3}}", [], R4,
     "split dimension 1 must be divisible by the split count 4, got 6"),
    ("all-to-all-two-dimensions", ["f32[4,4]"], "f32[4,4] all-to-all(p0), dimensions={0,1}, "
     "replica_groups={{0,1,2,3}}", [], R4, "dimensions must name exactly one split dimension, got {0,1}"),
    ("all-to-all-tuple-count", ["f32[4]", "f32[4]", "f32[4]"], "(f32[4], f32[4], f32[4]) all-to-all(p0, p1, p2), "
     "replica_groups={{0,1},{2,3}}", [], R4,
     "the operand count must be the split count 2 (the replica group size), got 3"),
    ("all-to-all-tuple-shapes", ["f32[4]", "f32[8]"], "(f32[4], f32[8]) all-to-all(p0, p1), replica_groups={{0,1}}",
     [], ", replica_count=2", "operand 1 must have the shape of operand 0 (f32[4]), got f32[8]"),
    ("all-to-all-partition-count", ["f32[4]"], "f32[4] all-to-all(p0), channel_id=1, dimensions={0}, "
     "replica_groups={{0,1}}", [], ", num_partitions=4", "replica_groups must name all 4 partitions, got 2 ids"),
    # --- ragged-all-to-all
    ("ragged-all-to-all-offsets-rank", ["f32[8]", "f32[8]", "s64[1,1,4]", "s64[1,1,4]", "s64[1,1,4]", "s64[1,1,4]"],
     "f32[8] ragged-all-to-all(p0, p1, p2, p3, p4, p5), replica_groups={{0,1,2,3}}", [], R4,
     "input_offsets must have rank 1 or 2, got s64[1,1,4]"),
    ("ragged-all-to-all-sizes-shape", ["f32[8]", "f32[8]", "s64[4]", "s64[5]", "s64[4]", "s64[4]"],
     "f32[8] ragged-all-to-all(p0, p1, p2, p3, p4, p5), replica_groups={{0,1,2,3}}", [], R4,
     "send_sizes must have the shape of input_offsets (s64[4]), got s64[5]"),
    ("ragged-all-to-all-output", ["f32[8]", "(f32[8])", "s64[4]", "s64[4]", "s64[4]", "s64[4]"],
     "(f32[8]) ragged-all-to-all(p0, p1, p2, p3, p4, p5), replica_groups={{0,1,2,3}}", [], R4,
     "output (operand 1) must be an array, got (f32[8])"),
    # --- collective-broadcast
    ("collective-broadcast-tuple", ["(f32[8])"], "(f32[8]) collective-broadcast(p0), replica_groups={{0,1}}", [], "",
     "operand must be an array, got (f32[8])"),
    # --- collective-permute (+ -start / -done)
    ("collective-permute-duplicate-source", ["f32[8]"], "f32[8] collective-permute(p0), "
     "source_target_pairs={{0,1},{0,2}}", [], R4,
     "the source ids of source_target_pairs must appear once, got 0 repeated"),
    ("collective-permute-duplicate-target", ["f32[8]"], "f32[8] collective-permute(p0), "
     "source_target_pairs={{0,1},{2,1}}", [], R4,
     "the target ids of source_target_pairs must appear once, got 1 repeated"),
    ("collective-permute-target-range", ["f32[8]"], "f32[8] collective-permute(p0), source_target_pairs={{0,2}}",
     [], ", replica_count=2", "the target ids of source_target_pairs must be in [0, 2), got 2"),
    ("collective-permute-negative", ["f32[8]"], "f32[8] collective-permute(p0), source_target_pairs={{-1,0}}", [], "",
     "the source ids of source_target_pairs must be in [0, 1), got -1"),
    ("collective-permute-in-place-offsets", ["f32[4,4]", "f32[8,4]", "(s32[])", "(s32[], s32[])"],
     "f32[8,4] collective-permute(p0, p1, p2, p3), source_target_pairs={{0,1},{1,0}}, slice_sizes={{4,4}}", [],
     ", replica_count=2", "the input offsets (operand 2) must hold 2 indices (the buffer rank), got 1"),
    ("collective-permute-in-place-count", ["f32[4,4]", "f32[8,4]", "(s32[], s32[])"],
     "f32[8,4] collective-permute(p0, p1, p2), source_target_pairs={{0,1},{1,0}}, slice_sizes={{4,4}}", [],
     ", replica_count=2", "the operand count must be 4 with slice_sizes"),
    ("collective-permute-start-duplicate", ["f32[8]"], "(f32[8], f32[8], u32[], u32[]) collective-permute-start(p0), "
     "source_target_pairs={{0,1},{0,1}}", [], R4, "the source ids of source_target_pairs must appear once"),
    ("collective-permute-done-operand", ["f32[8]"], "f32[8] collective-permute-done(p0)", [], "",
     "operand 0 must be a collective-permute-start value (source, destination, ...), got f32[8]"),
]

COMPS["neg_f32"] = "neg_f32 {\n  a = f32[] parameter(0)\n  ROOT r = f32[] negate(a)\n}"


@pytest.mark.parametrize("operands, line, comps, header, fragment", [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid(operands, line, comps, header, fragment):
    expect_error(fragment, operands, line, comps, header)


@pytest.mark.parametrize("opcode, operands, fragment", [
    ("replica-id", ["f32[]"], "the operand count must be 0, got 1"),
    ("partition-id", ["f32[]"], "the operand count must be 0, got 1"),
    ("all-reduce-done", ["f32[8]", "f32[8]"], "the operand count must be 1, got 2"),
])
def test_invalid_direct(opcode, operands, fragment):
    """Operand counts the parser itself refuses."""
    with pytest.raises(ShapeRuleError) as info:
        infer_shape(opcode, [S(s) for s in operands], {}, RuleContext(opcode))
    assert fragment in str(info.value) and TEMPLATE.match(str(info.value)), str(info.value)


def test_invalid_table_covers_every_opcode():
    covered = {opcode_of(line) for _, _, line, _, _, _ in INVALID} | {"replica-id", "partition-id", "all-reduce-done"}
    assert covered == set(OPCODES)
