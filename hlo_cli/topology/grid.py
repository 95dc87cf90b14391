"""The device grid of a multi-device run, and which devices take part together in a collective.

Devices are numbered like XLA's flattened ids: device = replica * partitions + partition.

Which devices form a group (XLA's GetCollectiveOpGroupMode and GetParticipatingDevicesGroups in
xla/service/collective_ops_utils.cc; measured on XLA CPU with 2 replicas x 4 partitions):

- all-reduce, all-gather, reduce-scatter (and their -start forms) read channel_id and
  use_global_device_ids: no channel_id -> cross-replica (the groups list replica ids; each
  partition has its own copy of every group); channel_id -> cross-replica-and-partition (the groups
  list replica ids, a group spans every partition of its replicas, ordered replica-major);
  channel_id + use_global_device_ids=true -> flattened ids (the groups list device ids).
- all-to-all, ragged-all-to-all, collective-broadcast, collective-permute, send/recv: no
  channel_id -> cross-replica; channel_id -> cross-partition (the groups list partition ids; each
  replica has its own copy of every group).
- empty replica_groups mean one group of every replica (of every partition in cross-partition
  mode); flattened-id mode needs explicit groups.
- A device's rank in its group is its position in the group AS WRITTEN: replica_groups={{3,1,2,0}}
  sums in the order 3, 1, 2, 0 and all-gather concatenates in that order (measured).
- A replica (partition) that appears in no group: XLA's verifier refuses the module when the
  module header states the count, and the runtime fails ("Replica ID %d doesn't appear in replica
  groups"); here it is a located error too.  The one exception is collective-broadcast, whose
  documented semantics give such devices zeros (`collective_groups(..., allow_missing=True)`).
- Groups of unequal size are valid for all-reduce only (XLA's verifier checks uniform sizes for
  every other collective).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import HloEvalError, instruction_diagnostic
from ..ir.opcodes import lookup
from ..shapes.families.collective import (CROSS_PARTITION, CROSS_REPLICA, CROSS_REPLICA_AND_PARTITION, FLATTENED_ID,
                                          mode_of, parse_pairs, replica_group_list)

# collectives whose replica groups may be of unequal size (XLA's verifier: all-reduce only)
_NON_UNIFORM_OK = frozenset({"all-reduce"})


def reads_global_ids(opcode: str) -> bool:
    """Whether the group mode of `opcode` reads use_global_device_ids: the opcodes whose row in the
    opcode table takes that attribute (XLA: HloAllGatherInstruction and HloAllReduceInstructionBase,
    which covers reduce-scatter)."""
    spec = lookup(opcode)
    return spec is not None and "use_global_device_ids" in spec.attrs


@dataclass(frozen=True)
class DeviceGrid:
    """`replicas` x `partitions` devices; device d is replica d // partitions, partition d % partitions."""
    replicas: int
    partitions: int

    def __post_init__(self):
        if self.replicas < 1 or self.partitions < 1:
            raise ValueError(f"a device grid needs at least one replica and one partition, "
                             f"got {self.replicas} x {self.partitions}")

    @property
    def count(self) -> int:
        return self.replicas * self.partitions

    def device(self, replica: int, partition: int) -> int:
        return replica * self.partitions + partition

    def replica_of(self, d: int) -> int:
        return d // self.partitions

    def partition_of(self, d: int) -> int:
        return d % self.partitions

    def describe(self, d: int) -> str:
        """'device 5 (replica 1, partition 1)', or shorter when one of the counts is 1."""
        if self.partitions == 1:
            return f"device {d} (replica {d})" if self.replicas > 1 else f"device {d}"
        if self.replicas == 1:
            return f"device {d} (partition {d})"
        return f"device {d} (replica {self.replica_of(d)}, partition {self.partition_of(d)})"


def fail(inst, message: str) -> HloEvalError:
    """A located evaluation error about collective `inst` (returned, for `raise fail(...)`)."""
    text = f"{inst.opcode} {inst.name}: {message}"
    return HloEvalError(text, [instruction_diagnostic(inst, f"{inst.name}: {inst.opcode}: {message}", "R020")])


def base_opcode(inst) -> str:
    """The collective an instruction performs: `all-reduce-start` -> `all-reduce`."""
    op = inst.opcode
    return op[: -len("-start")] if op.endswith("-start") else op


def group_mode(inst) -> str:
    """XLA's GetCollectiveOpGroupMode for collective `inst`."""
    op = base_opcode(inst)
    if reads_global_ids(op) and inst.attrs.get("channel_id") is None and inst.attrs.get("use_global_device_ids"):
        raise fail(inst, "use_global_device_ids=true needs a channel_id (XLA refuses this combination)")
    return mode_of(op, inst.attrs)


_WHAT = {CROSS_REPLICA: "replica", CROSS_REPLICA_AND_PARTITION: "replica", CROSS_PARTITION: "partition",
         FLATTENED_ID: "device"}


def _fmt(groups) -> str:
    text = "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"
    return text if len(text) <= 120 else text[:117] + "..."


def _id_groups(inst, grid: DeviceGrid, mode: str, allow_missing: bool):
    """The replica_groups attribute as groups of ids of the mode's kind, checked against the grid."""
    groups = [tuple(int(i) for i in g) for g in replica_group_list(inst.attrs)]
    limit = {CROSS_REPLICA: grid.replicas, CROSS_REPLICA_AND_PARTITION: grid.replicas,
             CROSS_PARTITION: grid.partitions, FLATTENED_ID: grid.count}[mode]
    what = _WHAT[mode]
    if not groups:
        if mode == FLATTENED_ID:
            raise fail(inst, "replica_groups must list the devices with use_global_device_ids=true, got {}")
        return [tuple(range(limit))]
    seen: set[int] = set()
    for g in groups:
        if not g:
            raise fail(inst, f"replica group {{}} is empty in replica_groups={_fmt(groups)}")
        for i in g:
            if not 0 <= i < limit:
                count = {"replica": f"{grid.replicas} replicas", "partition": f"{grid.partitions} partitions",
                         "device": f"{grid.count} devices"}[what]
                raise fail(inst, f"replica_groups={_fmt(groups)} names {what} {i}, but the run has {count} "
                           f"({what} ids 0..{limit - 1})")
            if i in seen:
                raise fail(inst, f"replica_groups={_fmt(groups)} names {what} {i} twice")
            seen.add(i)
    if base_opcode(inst) not in _NON_UNIFORM_OK and len({len(g) for g in groups}) > 1:
        raise fail(inst, f"replica groups must all have the same size, got sizes "
                   f"{','.join(str(len(g)) for g in groups)} in replica_groups={_fmt(groups)}")
    missing = [i for i in range(limit) if i not in seen]
    if missing and not allow_missing:
        ids = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise fail(inst, f"{what} {ids} {'is' if len(missing) == 1 else 'are'} in no replica group of "
                   f"replica_groups={_fmt(groups)} (the run has {limit} {what}s; XLA fails at run time too)")
    return groups


def collective_groups(inst, grid: DeviceGrid, allow_missing: bool = False) -> tuple[tuple[int, ...], ...]:
    """The groups of device ids that take part together in collective `inst`, each in rank order
    (XLA's GetParticipatingDevicesGroups).  Every device of the grid is in exactly one group,
    except with `allow_missing` (collective-broadcast), where devices named by no group are left out."""
    mode = group_mode(inst)
    ids = _id_groups(inst, grid, mode, allow_missing)
    R, P = grid.replicas, grid.partitions
    out: list[tuple[int, ...]] = []
    if mode == CROSS_REPLICA:
        for g in ids:
            out.extend(tuple(grid.device(r, p) for r in g) for p in range(P))
    elif mode == CROSS_PARTITION:
        for g in ids:
            out.extend(tuple(grid.device(r, p) for p in g) for r in range(R))
    elif mode == CROSS_REPLICA_AND_PARTITION:
        out.extend(tuple(grid.device(r, p) for r in g for p in range(P)) for g in ids)
    else:
        out.extend(tuple(g) for g in ids)
    return tuple(out)


def _pairs(inst, grid: DeviceGrid, raw, what_attr: str, cross_partition: bool) -> tuple[tuple[int, int], ...]:
    """Source/target pairs of ids (replica ids, or partition ids when `cross_partition`), expanded
    to device pairs for every partition (replica) of the grid."""
    limit = grid.partitions if cross_partition else grid.replicas
    what = "partition" if cross_partition else "replica"
    pairs = [(int(s), int(t)) for s, t in raw]
    for s, t in pairs:
        for v in (s, t):
            if not 0 <= v < limit:
                raise fail(inst, f"{what_attr} names {what} {v}, but the run has {limit} {what}"
                           f"{'s' if limit != 1 else ''} ({what} ids 0..{limit - 1}; "
                           f"{'with' if cross_partition else 'without'} a channel_id the pairs are {what} ids)")
    out = []
    if cross_partition:
        for r in range(grid.replicas):
            out.extend((grid.device(r, s), grid.device(r, t)) for s, t in pairs)
    else:
        for p in range(grid.partitions):
            out.extend((grid.device(s, p), grid.device(t, p)) for s, t in pairs)
    return tuple(out)


def permute_pairs(inst, grid: DeviceGrid) -> tuple[tuple[int, int], ...]:
    """collective-permute(-start): source_target_pairs as (source device, target device) pairs.
    Without channel_id the pairs are replica ids and hold within every partition; with one they are
    partition ids and hold within every replica (XLA's CollectivePermuteThunk)."""
    return _pairs(inst, grid, inst.attrs.get("source_target_pairs") or (), "source_target_pairs",
                  inst.attrs.get("channel_id") is not None)


SEND_RECV_PAIRS = "_xla_send_recv_source_target_pairs"


def send_recv_pairs(inst, grid: DeviceGrid) -> tuple[tuple[int, int], ...] | None:
    """send / recv: the frontend attribute _xla_send_recv_source_target_pairs ("{{0,1},{1,2}}") as
    device pairs, or None when the instruction has none.  Like collective-permute, a channel_id > 0
    makes the ids partition ids (within each replica), otherwise replica ids (XLA's
    GetP2PConfigForSendRecv)."""
    fa = inst.attrs.get("frontend_attributes")
    text = None
    if fa is not None:
        text = dict(getattr(fa, "items", ())).get(SEND_RECV_PAIRS)
    if text is None:
        return None
    raw = _parse_pairs(inst, text)
    channel = inst.attrs.get("channel_id")
    cross_partition = channel is not None and int(channel) > 0
    return _pairs(inst, grid, raw, SEND_RECV_PAIRS, cross_partition)


def _parse_pairs(inst, text: str) -> list[tuple[int, int]]:
    pairs = parse_pairs(text)
    if pairs is None or any(len(p) != 2 for p in pairs):
        raise fail(inst, f'frontend attribute {SEND_RECV_PAIRS}="{text}" must look like {{{{0,1}},{{1,2}}}}')
    return [(int(a), int(b)) for a, b in pairs]
