"""Shape rules of the collective family.

all-reduce (+ -start / -done), all-gather (+ -start / -done), reduce-scatter, all-to-all,
ragged-all-to-all, collective-broadcast, collective-permute (+ -start / -done), replica-id,
partition-id.

Group arithmetic (XLA's GetCollectiveOpGroupMode / GetSubgroupSize): without channel_id the
groups list replica ids (cross-replica); with channel_id they list replica ids of every partition
(cross-replica-and-partition, the group spans `num_partitions` times as many devices) unless
use_global_device_ids=true, where they list flattened device ids; all-to-all and
ragged-all-to-all with a channel_id group partitions.  The size of the first replica group is the
shard count of all-gather (the gathered dimension is multiplied by it), reduce-scatter (the
scattered dimension is divided by it) and the split count of all-to-all.  Empty replica_groups
mean one group of every replica (or partition): its size is the module's replica_count /
num_partitions, known to a rule only when the RuleContext carries them (``ctx.replica_count``,
``ctx.num_partitions`` or ``ctx.module_attrs``); otherwise, like XLA, the shard count is read off
the declared result shape.  (XLA parses the ``mode=`` attribute and ignores it; so do these
rules.)  The checker gives a rule only the counts the header (or the command line) declares: a count
the text leaves out is the module config's (XLA's own tests set it in code), so it is unknown here
and the shard count is read off the declared result, as XLA's verifier does for its default of 1.
One deliberate difference: XLA skips the shard-count check when the group size is 1; here explicit
groups of one device under declared counts gather / scatter nothing, so the shape must stay the
operand's.

Sources: XLA's ``ShapeInference::Infer{AllGather,AllGatherStart,AllGatherDone,AllReduce,
ReduceScatter,AllToAll,AllToAllTuple,RaggedAllToAll,CollectiveBroadcast,CollectivePermute,
CollectivePermuteStart,CollectivePermuteDone}Shape`` and ``ShapeVerifier``'s CheckReplicaGroups,
CheckCommonAllGatherInvariants, CheckInplaceCollectivePermute, CheckDuplicatedSourceOrTarget.
"""
from __future__ import annotations

import re

from ...ir.attributes import IotaReplicaGroups
from ...ir.opcodes import with_attribute
from ...ir.shape import UNBOUNDED
from ..registry import fail, rule
from .reduction import (array, compatible, computation, config_value, dims_attr, expect_array, expect_count,
                        is_array, is_scalar, is_tuple, same_element_type_ignoring_fp, scalar,
                        strip, tup, txt)

CROSS_REPLICA = "cross_replica"
CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
CROSS_PARTITION = "cross_partition"
FLATTENED_ID = "flattened_id"

# ShapeRuleError codes of the device-group findings; the checker reports S13x as C13x (see
# hlo_cli/checker/verify.py's CODES) and points at the attribute named here.
GROUPS = "S130"       # a malformed replica group: empty, an id out of range of the ids named, an id twice
COUNT = "S131"        # the groups do not name every replica / partition / device of the module
UNEVEN = "S132"       # replica groups of different sizes
MODE = "S133"         # use_global_device_ids without channel_id, flattened ids without groups
PAIRS = "S134"        # source_target_pairs: an id out of range, a source or target twice
PER_DEVICE = "S135"   # a collective's per-device shape does not fit its group size
CODE_ATTRIBUTE = {GROUPS: "replica_groups", COUNT: "replica_groups", UNEVEN: "replica_groups",
                  MODE: "use_global_device_ids", PAIRS: "source_target_pairs"}


def replica_group_list(attrs, ctx=None, operands=None, mode=None) -> list[tuple[int, ...]]:
    """The replica groups an instruction lists, whatever their form (empty: none listed).  With a
    rule's context and group mode, iota groups ([g,n]<=[dims], a few bytes for any number of ids)
    are checked against the module's device count before they are expanded."""
    rg = attrs.get("replica_groups")
    if rg is None:
        return []
    if isinstance(rg, IotaReplicaGroups):
        if ctx is not None and mode is not None:
            n = 1
            for d in rg.reshape_dims:
                n *= d
            _check_count(ctx, operands, n, mode)
        return [tuple(g) for g in rg.groups()]
    return [tuple(g) for g in rg.groups]


# the opcodes whose group mode use_global_device_ids decides (XLA's GetCollectiveOpGroupMode(instr)): those
# the table gives that attribute (all-reduce, all-gather, reduce-scatter and their -start)
_GLOBAL_ID_OPS = with_attribute("use_global_device_ids")


def mode_of(opcode: str, attrs) -> str:
    """The group mode of a collective (XLA's GetCollectiveOpGroupMode(instr)), without checks:
    use_global_device_ids without a channel_id (an error the shape rule reports) reads as
    cross-replica."""
    has_channel = attrs.get("channel_id") is not None
    if opcode not in _GLOBAL_ID_OPS or not has_channel:
        return CROSS_PARTITION if has_channel else CROSS_REPLICA
    return FLATTENED_ID if attrs.get("use_global_device_ids") else CROSS_REPLICA_AND_PARTITION


def id_space(mode: str, replicas: int, partitions: int) -> tuple[int, str]:
    """(how many ids, what they count) the replica groups of `mode` list: replica ids, partition
    ids, or flattened device ids."""
    if mode == CROSS_PARTITION:
        return partitions, "partitions"
    if mode == FLATTENED_ID:
        return replicas * partitions, "devices"
    return replicas, "replicas"


def device_group_sizes(opcode: str, attrs, replicas: int, partitions: int) -> tuple[int, ...]:
    """The sizes (in devices) of the groups a collective runs in, sorted and without repeats:
    empty replica_groups mean one group of every id; in cross-replica-and-partition mode a group
    of replicas spans every partition."""
    mode = mode_of(opcode, attrs)
    groups = replica_group_list(attrs)
    sizes = {len(g) for g in groups} or {id_space(mode, replicas, partitions)[0]}
    if mode == CROSS_REPLICA_AND_PARTITION:
        sizes = {z * partitions for z in sizes}
    return tuple(sorted(sizes))


def group_mode(ctx, operands, attrs, use_global_device_ids_applies: bool = True) -> str:
    """XLA's GetCollectiveOpGroupMode."""
    has_channel = attrs.get("channel_id") is not None
    if not use_global_device_ids_applies:
        return CROSS_PARTITION if has_channel else CROSS_REPLICA
    ugdi = bool(attrs.get("use_global_device_ids", False))
    if not has_channel:
        if ugdi:
            fail(ctx.opcode, "use_global_device_ids=true", "come with a channel_id", "no channel_id", operands, MODE)
        return CROSS_REPLICA
    return FLATTENED_ID if ugdi else CROSS_REPLICA_AND_PARTITION


def check_replica_groups(ctx, operands, groups, mode, uniform: bool = True) -> None:
    """XLA's CheckReplicaGroups: ids 0..n-1 each exactly once, no empty group, uniform sizes
    (except all-reduce), n matching the module's replica/partition count when that is known."""
    op = ctx.opcode
    if not groups:
        if mode == FLATTENED_ID:
            fail(op, "replica_groups", "be given with use_global_device_ids=true (flattened ids)", "{}", operands,
                 MODE)
        return
    n = sum(len(g) for g in groups)
    seen = set()
    for g in groups:
        if not g:
            fail(op, "replica groups", "not be empty", "an empty group", operands, GROUPS)
        for i in g:
            if not 0 <= i < n:
                fail(op, "replica ids", f"be in [0, {n})", i, operands, GROUPS)
            if i in seen:
                fail(op, "replica ids", "appear in one replica group only once", f"{i} repeated", operands, GROUPS)
            seen.add(i)
    _check_count(ctx, operands, n, mode)
    if uniform and len({len(g) for g in groups}) > 1:
        fail(op, "replica groups", "all have the same size",
             "sizes " + ",".join(str(len(g)) for g in groups), operands, UNEVEN)


def _check_count(ctx, operands, n: int, mode: str) -> None:
    """The n ids replica groups name against the module's replica / partition / device count."""
    op = ctx.opcode
    replicas = config_value(ctx, "replica_count")
    partitions = config_value(ctx, "num_partitions")
    if mode in (CROSS_REPLICA, CROSS_REPLICA_AND_PARTITION):
        if replicas not in (None, 1) and n != replicas:
            fail(op, "replica_groups", f"name all {replicas} replicas", f"{n} ids", operands, COUNT)
    elif mode == CROSS_PARTITION:
        if partitions not in (None, 1) and n != partitions:
            fail(op, "replica_groups", f"name all {partitions} partitions", f"{n} ids", operands, COUNT)
    elif mode == FLATTENED_ID and (replicas is not None or partitions is not None):
        total = (replicas or 1) * (partitions or 1)     # a count the header leaves out: XLA's default 1
        if total != 1 and n != total:
            fail(op, "replica_groups", f"name all {total} devices (replicas x partitions)", f"{n} ids", operands,
                 COUNT)


def subgroup_size(ctx, groups, mode) -> tuple[int | None, int | None]:
    """(exact group size or None, a known factor of it or None) — XLA's GetSubgroupSize."""
    replicas = config_value(ctx, "replica_count")
    partitions = config_value(ctx, "num_partitions")
    g = len(groups[0]) if groups else None
    if mode == FLATTENED_ID:
        return g, g
    if mode == CROSS_PARTITION:
        size = g if g is not None else partitions
        return size, size
    size = g if g is not None else replicas
    if mode == CROSS_REPLICA_AND_PARTITION:
        if size is not None and partitions is not None:
            return size * partitions, size * partitions
        return None, size
    return size, size


def _check_reduction(ctx, operands, attrs):
    """The to_apply of all-reduce / reduce-scatter: a binary scalar reduction of the element type."""
    op = ctx.opcode
    params, result = computation(ctx, attrs, "to_apply")
    if len(params) != 2:
        fail(op, "to_apply", "take 2 parameters", len(params), operands)
    if result is None:      # the root's shape was left to inference: nothing more to compare
        return
    if not is_scalar(result):
        fail(op, "the result of to_apply", "be a scalar", txt(result), operands)
    for i, o in enumerate(operands):
        if is_array(o) and not same_element_type_ignoring_fp(o.element_type, result.element_type):
            fail(op, "the to_apply reduction", f"have the element type of operand {i} ({o.element_type})",
                 txt(result), operands)


def _one_dimension(ctx, operands, attrs) -> int:
    dims = dims_attr(attrs, "dimensions")
    if len(dims) != 1:
        fail(ctx.opcode, "dimensions", "name exactly one dimension", "{" + ",".join(map(str, dims)) + "}", operands)
    d = dims[0]
    if d < 0:
        fail(ctx.opcode, "the dimension", "be non-negative", d, operands)
    for i, s in enumerate(operands):
        expect_array(ctx, operands, i, f"operand {i}")
        if d >= s.rank:
            fail(ctx.opcode, "the dimension", f"be smaller than the rank of operand {i} ({s.rank})", d, operands)
    return d


def _one_or_tuple(shapes):
    return shapes[0] if len(shapes) == 1 else tup(shapes)


def _declared_outputs(declared, count: int):
    """The declared output arrays of a collective with `count` operands (or None)."""
    if declared is None:
        return None
    if count == 1:
        return [declared] if is_array(declared) else None
    if is_tuple(declared) and len(declared.tuple_shapes) == count:
        return list(declared.tuple_shapes)
    return None


# ---------------------------------------------------------------------------- all-reduce

@rule("all-reduce", "all-reduce-start")
def infer_all_reduce(operands, attrs, ctx):
    """all-reduce(operands...): the operand (or the tuple of operands), reduced across replicas."""
    expect_count(ctx, operands, 1, None)
    for i in range(len(operands)):
        expect_array(ctx, operands, i, f"operand {i}")
    mode = group_mode(ctx, operands, attrs)
    check_replica_groups(ctx, operands, replica_group_list(attrs, ctx, operands, mode), mode, uniform=False)
    _check_reduction(ctx, operands, attrs)
    return _one_or_tuple([strip(o) for o in operands])


@rule("all-reduce-done")
def infer_all_reduce_done(operands, attrs, ctx):
    """all-reduce-done(start): the all-reduce-start's value, forwarded."""
    expect_count(ctx, operands, 1, 1)
    return strip(operands[0])


# ---------------------------------------------------------------------------- all-gather

def _all_gather_outputs(ctx, operands, attrs, declared_outputs):
    op = ctx.opcode
    d = _one_dimension(ctx, operands, attrs)
    mode = group_mode(ctx, operands, attrs)
    groups = replica_group_list(attrs, ctx, operands, mode)
    check_replica_groups(ctx, operands, groups, mode)
    exact, factor = subgroup_size(ctx, groups, mode)
    in0 = operands[0].dims[d]
    out0 = declared_outputs[0].dims[d] if declared_outputs and d < declared_outputs[0].rank else None
    if exact is not None and (exact != 1 or groups):
        shard = exact
        why = f"the replica group size {exact}"
    elif out0 is not None and in0 not in (0, UNBOUNDED) and out0 != UNBOUNDED:
        shard = -(-out0 // in0)              # XLA reads the shard count off the declared shape
        why = "the shard count"
        if out0 % in0:
            fail(op, f"result dimension {d}", f"be a multiple of operand dimension {d} ({in0})", out0, operands,
                 PER_DEVICE)
        if factor is not None and shard % factor:
            fail(op, "the shard count", f"be a multiple of the replica group size {factor}", shard, operands,
                 PER_DEVICE)
    elif exact is not None:
        shard, why = exact, f"the replica group size {exact}"
    else:
        fail(op, "the shard count", "be known from replica_groups, the module's replica count or the declared "
             "result", "nothing", operands)
    if out0 is not None and in0 != UNBOUNDED and out0 != in0 * shard and why != "the shard count":
        fail(op, f"result dimension {d}", f"be {in0} x {shard} = {in0 * shard} (operand dimension {d} times {why})",
             out0, operands, PER_DEVICE)
    outs = []
    for s in operands:
        dims = list(s.dims)
        dims[d] = UNBOUNDED if dims[d] == UNBOUNDED else dims[d] * shard
        outs.append(array(s.element_type, dims, s.dynamic))
    return outs


@rule("all-gather")
def infer_all_gather(operands, attrs, ctx):
    """all-gather(operands...): each operand with `dimensions` multiplied by the group size."""
    expect_count(ctx, operands, 1, None)
    outs = _all_gather_outputs(ctx, operands, attrs, _declared_outputs(ctx.declared, len(operands)))
    return _one_or_tuple(outs)


@rule("all-gather-start")
def infer_all_gather_start(operands, attrs, ctx):
    """all-gather-start(operands...): (operand(s), gathered result(s))."""
    expect_count(ctx, operands, 1, None)
    d = ctx.declared
    declared = None
    if d is not None and is_tuple(d) and len(d.tuple_shapes) == 2:
        declared = _declared_outputs(d.tuple_shapes[1], len(operands))
    outs = _all_gather_outputs(ctx, operands, attrs, declared)
    return tup([_one_or_tuple([strip(o) for o in operands]), _one_or_tuple(outs)])


@rule("all-gather-done")
def infer_all_gather_done(operands, attrs, ctx):
    """all-gather-done(start): the gathered part of the all-gather-start's value."""
    expect_count(ctx, operands, 1, 1)
    s = operands[0]
    if not is_tuple(s) or len(s.tuple_shapes) != 2:
        fail(ctx.opcode, "operand 0", "be an all-gather-start value (operands, results)", txt(s), operands)
    return strip(s.tuple_shapes[1])


# ---------------------------------------------------------------------------- reduce-scatter

@rule("reduce-scatter")
def infer_reduce_scatter(operands, attrs, ctx):
    """reduce-scatter(operands...): each operand with `dimensions` divided by the group size."""
    op = ctx.opcode
    expect_count(ctx, operands, 1, None)
    d = _one_dimension(ctx, operands, attrs)
    mode = group_mode(ctx, operands, attrs)
    groups = replica_group_list(attrs, ctx, operands, mode)
    check_replica_groups(ctx, operands, groups, mode)
    _check_reduction(ctx, operands, attrs)
    exact, factor = subgroup_size(ctx, groups, mode)
    declared = _declared_outputs(ctx.declared, len(operands))
    in0 = operands[0].dims[d]
    out0 = declared[0].dims[d] if declared and d < declared[0].rank else None
    if exact is not None and (exact != 1 or groups):
        shard = exact
    elif out0 not in (None, 0, UNBOUNDED) and in0 != UNBOUNDED:
        shard = -(-in0 // out0)
        if factor is not None and shard % factor:
            fail(op, "the shard count", f"be a multiple of the replica group size {factor}", shard, operands,
                 PER_DEVICE)
    elif exact is not None:
        shard = exact
    else:
        fail(op, "the shard count", "be known from replica_groups, the module's replica count or the declared "
             "result", "nothing", operands)
    outs = []
    for i, s in enumerate(operands):
        size = s.dims[d]
        if size != UNBOUNDED and size % shard:
            fail(op, f"dimension {d} of operand {i}", f"be divisible by the shard count {shard}", size, operands,
                 PER_DEVICE)
        dims = list(s.dims)
        dims[d] = UNBOUNDED if s.dynamic[d] else size // shard
        outs.append(array(s.element_type, dims, s.dynamic))
    return _one_or_tuple(outs)


# ---------------------------------------------------------------------------- all-to-all

@rule("all-to-all")
def infer_all_to_all(operands, attrs, ctx):
    """all-to-all(operand), dimensions={d}: the operand's shape (split and concatenated along d,
    whose size must divide by the group size); without dimensions, the tuple of its operands
    (one per group member, all of one shape)."""
    op = ctx.opcode
    expect_count(ctx, operands, 1, None)
    mode = group_mode(ctx, operands, attrs, use_global_device_ids_applies=False)
    groups = replica_group_list(attrs, ctx, operands, mode)
    check_replica_groups(ctx, operands, groups, mode)
    count, _ = subgroup_size(ctx, groups, mode)
    dims = attrs.get("dimensions")
    if dims is not None and len(dims) > 0:
        if len(dims) != 1:
            fail(op, "dimensions", "name exactly one split dimension", "{" + ",".join(map(str, dims)) + "}",
                 operands)
        if len(operands) != 1:
            fail(op, "the operand count", "be 1 when a split dimension is given", len(operands), operands)
        x = expect_array(ctx, operands, 0, "operand")
        d = dims[0]
        if not 0 <= d < x.rank:
            fail(op, "the split dimension", f"be in [0, {x.rank})", d, operands)
        if any(dy and sz != UNBOUNDED for sz, dy in zip(x.dims, x.dynamic)):
            fail(op, "operand", "not have bounded dynamic dimensions", txt(x), operands)
        if count is not None and count > 0 and x.dims[d] != UNBOUNDED and x.dims[d] % count:
            fail(op, f"split dimension {d}", f"be divisible by the split count {count}", x.dims[d], operands,
                 PER_DEVICE)
        return strip(x)
    if count is not None and len(operands) != count:
        fail(op, "the operand count", f"be the split count {count} (the replica group size)",
             len(operands), operands, PER_DEVICE)
    first = operands[0]
    for i, s in enumerate(operands):
        if is_array(s) and any(sz == UNBOUNDED for sz in s.dims):
            fail(op, f"operand {i}", "not be unbounded dynamic", txt(s), operands)
        if not compatible(s, first) or (is_array(s) and s.dynamic != first.dynamic):
            fail(op, f"operand {i}", f"have the shape of operand 0 ({txt(first)})", txt(s), operands)
    return tup(strip(s) for s in operands)


@rule("ragged-all-to-all")
def infer_ragged_all_to_all(operands, attrs, ctx):
    """ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets, recv_sizes):
    the output buffer's shape."""
    op = ctx.opcode
    expect_count(ctx, operands, 6, 6)
    mode = group_mode(ctx, operands, attrs, use_global_device_ids_applies=False)
    check_replica_groups(ctx, operands, replica_group_list(attrs, ctx, operands, mode), mode)
    names = ["input", "output", "input_offsets", "send_sizes", "output_offsets", "recv_sizes"]
    for i in range(2, 6):
        s = expect_array(ctx, operands, i, names[i])
        if s.rank not in (1, 2):
            fail(op, names[i], "have rank 1 or 2", txt(s), operands)
        if i > 2 and not (compatible(s, operands[2]) and s.dynamic == operands[2].dynamic):
            fail(op, names[i], f"have the shape of input_offsets ({txt(operands[2])})", txt(s), operands)
    return strip(expect_array(ctx, operands, 1, "output (operand 1)"))


@rule("collective-broadcast")
def infer_collective_broadcast(operands, attrs, ctx):
    """collective-broadcast(operand): the operand's shape."""
    expect_count(ctx, operands, 1, None)
    return strip(expect_array(ctx, operands, 0, "operand"))


# ---------------------------------------------------------------------------- collective-permute

def _check_buffer_offsets(ctx, operands, buffer, offsets, what):
    op = ctx.opcode
    if not is_tuple(offsets):
        fail(op, what, "be a tuple of start indices", txt(offsets), operands)
    elems = offsets.tuple_shapes
    if all(is_tuple(e) for e in elems) and elems:
        for e in elems:
            if len(e.tuple_shapes) != buffer.rank:
                fail(op, what, f"hold {buffer.rank} indices (the buffer rank) per entry", txt(offsets), operands)
    elif all(not is_tuple(e) for e in elems):
        if len(elems) != buffer.rank:
            fail(op, what, f"hold {buffer.rank} indices (the buffer rank)", len(elems), operands)
    else:
        fail(op, what, "be a tuple of arrays or a tuple of tuples", txt(offsets), operands)


def _permute_checks(ctx, operands, attrs) -> bool:
    """In-place checks and source/target pair checks; returns whether the permute is in place."""
    op = ctx.opcode
    inplace = attrs.get("slice_sizes") is not None
    if inplace:
        if len(operands) != 4:
            fail(op, "the operand count", "be 4 with slice_sizes (input, output, input and output offsets)",
                 len(operands), operands)
        src, dst, soff, doff = operands
        if is_array(src) and is_array(dst):
            _check_buffer_offsets(ctx, operands, src, soff, "the input offsets (operand 2)")
            _check_buffer_offsets(ctx, operands, dst, doff, "the output offsets (operand 3)")
        elif is_tuple(src) and is_tuple(dst):
            if len(src.tuple_shapes) != len(dst.tuple_shapes):
                fail(op, "the input and output buffers", "have the same number of elements",
                     f"{len(src.tuple_shapes)} and {len(dst.tuple_shapes)}", operands)
            for what, buf, off in (("the input offsets (operand 2)", src, soff),
                                   ("the output offsets (operand 3)", dst, doff)):
                if not is_tuple(off) or len(off.tuple_shapes) != len(buf.tuple_shapes):
                    fail(op, what, f"have one entry per buffer ({len(buf.tuple_shapes)})", txt(off), operands)
                for b, o in zip(buf.tuple_shapes, off.tuple_shapes):
                    _check_buffer_offsets(ctx, operands, b, o, what)
        else:
            fail(op, "the input and output buffers", "both be arrays or both be tuples",
                 f"{txt(src)} and {txt(dst)}", operands)
    else:
        for i in range(len(operands)):
            expect_array(ctx, operands, i, f"operand {i}")
    pairs = attrs.get("source_target_pairs") or ()
    allowed = 1
    if inplace:
        off = operands[2]
        allowed = len(off.tuple_shapes) if is_array(operands[0]) else len(off.tuple_shapes[0].tuple_shapes)
    mode = CROSS_PARTITION if attrs.get("channel_id") is not None else CROSS_REPLICA
    limit = config_value(ctx, "replica_count" if mode == CROSS_REPLICA else "num_partitions")
    of = f" (the module has {limit} {'replicas' if mode == CROSS_REPLICA else 'partitions'})"
    if limit in (None, 1):       # XLA's CheckDuplicatedSourceOrTarget: a count of 1 means "not set"
        limit = max([1] + [max(p) + 1 for p in pairs])
        of = ""
    sources: dict[int, int] = {}
    targets: dict[int, int] = {}
    for s, t in pairs:
        for what, v, seen in (("source", s, sources), ("target", t, targets)):
            if not 0 <= v < limit:
                fail(op, f"the {what} ids of source_target_pairs", f"be in [0, {limit})", f"{v}{of}", operands, PAIRS)
            seen[v] = seen.get(v, 0) + 1
            if seen[v] > allowed:
                fail(op, f"the {what} ids of source_target_pairs",
                     "appear once" if allowed == 1 else f"appear at most {allowed} times", f"{v} repeated", operands,
                     PAIRS)
    return inplace


@rule("collective-permute")
def infer_collective_permute(operands, attrs, ctx):
    """collective-permute(operands...): the operand (or tuple of operands); in place (with
    slice_sizes: input, output, input offsets, output offsets) the output buffer."""
    expect_count(ctx, operands, 1, None)
    if _permute_checks(ctx, operands, attrs):
        return strip(operands[1])
    return _one_or_tuple([strip(o) for o in operands])


@rule("collective-permute-start")
def infer_collective_permute_start(operands, attrs, ctx):
    """collective-permute-start: (source, destination, context...)."""
    expect_count(ctx, operands, 1, None)
    if _permute_checks(ctx, operands, attrs):
        shapes = [strip(operands[0]), strip(operands[1])]
    else:
        one = _one_or_tuple([strip(o) for o in operands])
        shapes = [one, one]
    d = ctx.declared
    context = [strip(s) for s in d.tuple_shapes[2:]] if d is not None and is_tuple(d) else []
    return tup(shapes + context)


@rule("collective-permute-done")
def infer_collective_permute_done(operands, attrs, ctx):
    """collective-permute-done(start): the destination buffer."""
    expect_count(ctx, operands, 1, 1)
    s = operands[0]
    if not is_tuple(s) or len(s.tuple_shapes) < 2:
        fail(ctx.opcode, "operand 0", "be a collective-permute-start value (source, destination, ...)",
             txt(s), operands)
    return strip(s.tuple_shapes[1])


@rule("replica-id", "partition-id")
def infer_device_id(operands, attrs, ctx):
    """replica-id() / partition-id(): u32[]."""
    expect_count(ctx, operands, 0, 0)
    return scalar("u32")


_PAIR = re.compile(r"\{\s*([^{}]*?)\s*\}")


def parse_pairs(text: str) -> list[tuple[int, ...]] | None:
    """`{{0,1},{1,2}}` -> [(0, 1), (1, 2)]; None when the text is not a list of integer groups."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        return None
    inner = t[1:-1].strip()
    out = []
    pos = 0
    for m in _PAIR.finditer(inner):
        if inner[pos:m.start()].strip(" ,"):
            return None
        try:
            out.append(tuple(int(x) for x in m.group(1).split(",") if x.strip()))
        except ValueError:
            return None
        pos = m.end()
    if inner[pos:].strip(" ,"):
        return None
    return out
