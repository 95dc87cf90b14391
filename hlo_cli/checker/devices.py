"""hlo check: the module against its devices (replica_count x num_partitions).

The shape rules (hlo_cli/shapes/families/collective.py) already apply XLA's CheckReplicaGroups and
CheckDuplicatedSourceOrTarget, whose count checks XLA skips when the count is 1 (its default when
the module config does not say).  This pass adds what those rules cannot see:

- groups or pairs naming more replicas / partitions / devices than a count of 1: an error when the
  count is known (the header, or --replicas/--partitions, gives replica_count or num_partitions:
  XLA's runtime then fails), a warning (W206) when the header gives no count at all and they do not
  fit the devices `hlo run` would simulate (XLA's default of 1, or a Shardy mesh before partitioning);
- collective-broadcast's groups, which XLA's verifier does not look at but its runtime does;
- the `_xla_send_recv_source_target_pairs` of send / recv (warnings);
- `sharding=` against the instruction's shape and the device count (XLA's HloSharding::Validate);
- Shardy meshes and `xla.sdy.sharding` attributes: readable, and fitting the shape (warnings, W207).

Findings are (instruction, code, message, severity, attribute name to point at or None).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.attributes import IotaReplicaGroups
from ..ir.module import Instruction, Module
from ..ir.opcodes import with_attribute
from ..ir.shape import Shape
from ..shapes.families.collective import (CROSS_PARTITION, CROSS_REPLICA, id_space, mode_of, parse_pairs,
                                          replica_group_list)
from .scan import ModuleScan

SEND_RECV_PAIRS = "_xla_send_recv_source_target_pairs"
_GROUPED = with_attribute("replica_groups")          # the collectives that run in replica groups
_PERMUTES = with_attribute("source_target_pairs")    # collective-permute and its -start
_LOOKED_AT = _GROUPED | _PERMUTES | {"send", "recv"}   # the opcodes this pass looks at whatever their attributes


@dataclass(frozen=True)
class Devices:
    """The device counts a module is checked against: the command line's, else the header's, else
    XLA's default 1 x 1 (`known` False).  `run_replicas` x `run_partitions`: the devices `hlo run`
    simulates (hlo_cli.topology.grid_of), which for a module before partitioning come from its Shardy
    mesh or its shardings."""
    replicas: int
    partitions: int
    known: bool
    source: str
    run_replicas: int
    run_partitions: int
    declared: tuple[str, ...] = ()        # "replicas" / "partitions": the counts the module or command line gives

    def declares(self, noun: str) -> bool:
        """Whether the count of `noun` (replicas, partitions, or devices: both) is given.  XLA's
        module config holds the count the text leaves out (a test or a runner sets it), so ids
        beyond an undeclared count are not the module's error (CheckReplicaGroups reads a count of
        1 as "not set")."""
        if noun in ("replicas", "partitions"):
            return noun in self.declared
        return "replicas" in self.declared and "partitions" in self.declared

    @property
    def count(self) -> int:
        return self.run_replicas * self.run_partitions

    def run_count(self, noun: str) -> int:
        """How many replicas / partitions / devices a run has."""
        return {"replicas": self.run_replicas, "partitions": self.run_partitions}.get(noun, self.count)


def module_devices(module: Module, replicas: int | None = None, partitions: int | None = None) -> Devices:
    """The counts given, each else the header's replica_count / num_partitions."""
    from ..topology import grid_of
    from ..errors import HloError
    attrs = module.attrs
    given = replicas is not None or partitions is not None
    known = given or "replica_count" in attrs or "num_partitions" in attrs
    r = replicas if replicas is not None else int(attrs.get("replica_count", 1) or 1)
    p = partitions if partitions is not None else int(attrs.get("num_partitions", 1) or 1)
    try:
        grid = grid_of(module, replicas, partitions)
        run_r, run_p = grid.replicas, grid.partitions
    except HloError:                 # a malformed Shardy mesh: the run reports it
        run_r, run_p = r, p
    if known:
        declared = tuple(n for n, v, key in (("replicas", replicas, "replica_count"),
                                             ("partitions", partitions, "num_partitions"))
                         if v is not None or key in attrs)
        return Devices(r, p, True, "the command line" if given else "the module", run_r, run_p, declared)
    source = "the module's mesh" if run_r * run_p > 1 else "XLA's default"
    return Devices(1, 1, False, source, run_r, run_p)


def device_findings(module: Module, devices: Devices, effective: dict[str, dict[str, Shape | None]],
                    module_level: bool = True, scan: ModuleScan | None = None):
    """Every finding of this pass, in module order (a finding about the module itself has no
    instruction: None; `module_level` False leaves those out, for a part of a module whose other
    part reports them; `scan`: the module's ModuleScan, when at hand)."""
    from ..topology.sharding import ShardingError, sdy_meshes
    try:
        sdy_meshes(module)
        meshes_ok = True
    except ShardingError as e:     # Shardy's import refuses it; XLA's verifier does not read it
        meshes_ok = False
        if module_level:
            yield (None, "W207", f"xla.sdy.meshes: {_first_line(e)}", "warning", "xla.sdy.meshes")
    for k, comp in enumerate(module.computations):
        eff = effective.get(comp.name, {})
        looked_at = comp.instructions
        if scan is not None and _LOOKED_AT.isdisjoint(scan.facts[k].opcodes):
            looked_at = scan.facts[k].marked    # (the others have neither a sharding nor frontend attributes)
        for inst in looked_at:
            op = inst.opcode
            attrs = inst.attrs
            if op not in _LOOKED_AT and "sharding" not in attrs and "frontend_attributes" not in attrs:
                continue            # (the usual case: nothing of this pass's in the instruction)
            if op in _GROUPED:
                yield from _groups_beyond_one(inst, devices)
                if op == "collective-broadcast":
                    yield from _broadcast_groups(inst, devices)
            elif op in _PERMUTES:
                yield from _pairs_beyond_one(inst, devices)
            elif op in ("send", "recv"):
                yield from _send_recv_pairs(inst, devices)
            sharding = attrs.get("sharding")
            shape = eff.get(inst.name) or inst.shape
            if sharding is not None and shape is not None:
                yield from _sharding_findings(inst, sharding, shape, devices)
            elif shape is not None and meshes_ok and "frontend_attributes" in attrs and \
                    _sdy_text(inst) is not None:
                yield from _sdy_findings(inst, shape, module)


def _no_count_hint(noun: str, n: int, devices: Devices | None = None) -> str:
    flag = {"replicas": f"--replicas {n}", "partitions": f"--partitions {n}"}.get(
        noun, f"--partitions {n}, or --replicas and --partitions multiplying to {n}")
    if devices is not None and devices.declared:
        missing = {"replicas": "replica_count", "partitions": "num_partitions"}.get(
            noun, "replica_count and num_partitions both")
        return (f"the module's header does not give {missing} (XLA's module config does, so XLA "
                f"accepts the text), and a run takes 1; give the device count ({flag})")
    return (f"the module's header gives neither replica_count nor num_partitions, so XLA takes 1; "
            f"give the device count ({flag})")


def _groups_beyond_one(inst: Instruction, devices: Devices):
    """Explicit groups when the id space has one id, which the shape rule (like XLA's verifier)
    skips; and, without a count in the header, groups that do not fit the devices `hlo run` would
    simulate."""
    mode = mode_of(inst.opcode, inst.attrs)
    count, noun = id_space(mode, devices.replicas, devices.partitions)
    if devices.known and count != 1:
        return                  # the shape rule compares the ids with the count
    rg = inst.attrs.get("replica_groups")
    if isinstance(rg, IotaReplicaGroups):       # the ids 0..n-1, not expanded
        ids = range(math.prod(rg.reshape_dims))
    else:
        ids = sorted({i for g in replica_group_list(inst.attrs) for i in g})
    if not ids or ids[0] < 0:
        return                  # negative ids: the shape rule's finding
    n = len(ids)
    if devices.known and ids[-1] < 1:
        return                  # one id named: nothing beyond the count
    if devices.declares(noun):
        # XLA's verifier lets this pass (a count of 1 reads as "not set"), but its runtime fails in
        # GetParticipatingDevices (TF_RET_CHECK id < count) on a module config of one.
        yield (inst, "C131", f"{inst.opcode}: replica_groups must name only the ids of the {count} "
               f"{noun[:-1]} {devices.source} has, got {n} {noun} (ids up to {ids[-1]})", "error", "replica_groups")
        return
    # a count the header leaves out is the module config's (XLA's tests set it in code): not the
    # module's error, but a run needs it
    run = devices.run_count(noun)
    if ids[-1] < run and (n == run or run == 1):
        return                  # fits the devices a run has (its mesh, before partitioning)
    if run > 1:
        why = (f"{devices.source} has {run} (the header gives no count; XLA checks the groups against the count "
               "it compiles for)")
    else:
        why = _no_count_hint(noun, n, devices)
    yield (inst, "W206", f"{inst.opcode}: replica_groups name {n} {noun}, but {why}", "warning", "replica_groups")


def _broadcast_groups(inst: Instruction, devices: Devices):
    """collective-broadcast: XLA's verifier checks no groups (HandleCollectiveBroadcast); its
    runtime fails for a device that no group names or an id past the count."""
    mode = mode_of(inst.opcode, inst.attrs)
    count, noun = id_space(mode, devices.replicas, devices.partitions)
    groups = replica_group_list(inst.attrs)
    if not groups or count == 1:
        return
    ids = [i for g in groups for i in g]
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        yield (inst, "C131", f"{inst.opcode}: replica ids must be in [0, {count}) (the {count} {noun} of "
               f"{devices.source}), got {bad[0]}", "error", "replica_groups")
        return
    named = set(ids)
    # the first few ids no group names, and how many (counted, not listed: the count may be huge)
    n_missing = count - len(named)
    if n_missing > 0:
        first = [k for k in range(min(count, len(named) + 8)) if k not in named][:8]
        shown = ", ".join(map(str, first)) + (f" and {n_missing - len(first)} more" if n_missing > len(first) else "")
        yield (inst, "C131", f"{inst.opcode}: replica_groups must name every one of the {count} {noun} "
               f"(XLA's runtime fails for one no group names), got none naming {shown}", "error",
               "replica_groups")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        # stricter than XLA's verifier, which does not check collective-broadcast's groups
        yield (inst, "W206", f"{inst.opcode}: each id should be in one replica group only, got "
               f"{_ids(twice)} more than once (XLA's verifier does not check; its runtime uses the first group)",
               "warning", "replica_groups")


def _pairs_beyond_one(inst: Instruction, devices: Devices):
    """collective-permute pairs naming ids past a count of 1, which XLA's verifier reads as "not
    set" (CheckDuplicatedSourceOrTarget then takes the largest id named)."""
    mode = CROSS_PARTITION if inst.attrs.get("channel_id") is not None else CROSS_REPLICA
    count, noun = id_space(mode, devices.replicas, devices.partitions)
    pairs = inst.attrs.get("source_target_pairs") or ()
    if count != 1 or not pairs:
        return
    top = max(max(p) for p in pairs)
    if top < 1 or min(min(p) for p in pairs) < 0:
        return
    if not devices.declares(noun) and top < devices.run_count(noun):
        return
    if devices.declares(noun):
        # XLA's verifier reads a count of 1 as "not set"; XLA CPU's runtime then aborts the process
        # (std::out_of_range, measured with jaxlib 0.10.2 on 4 replicas x 1 partition)
        yield (inst, "C134", f"{inst.opcode}: the ids of source_target_pairs must be in [0, 1) (the 1 "
               f"{noun[:-1]} {devices.source} has), got {top}", "error", "source_target_pairs")
        return
    yield (inst, "W206", f"{inst.opcode}: source_target_pairs name {noun} up to {top}, but "
           f"{_no_count_hint(noun, top + 1, devices)}", "warning", "source_target_pairs")


def _send_recv_pairs(inst: Instruction, devices: Devices):
    """The source/target pairs a send or recv carries as a frontend attribute.  XLA's verifier
    checks them only in scheduled GPU modules (VerifyNoCollectiveDeadlocks), its GPU runtime wants
    pairs of two ids; all findings here are warnings."""
    if inst.attrs.get("is_host_transfer"):
        return
    text = _frontend(inst).get(SEND_RECV_PAIRS)
    if text is None:
        return
    pairs = parse_pairs(text)
    if pairs is None or any(len(p) != 2 for p in pairs):
        yield (inst, "W206", f"{inst.opcode}: {SEND_RECV_PAIRS} should list {{source,target}} pairs like "
               f"{{{{0,1}},{{1,2}}}}, got \"{text}\"", "warning", "frontend_attributes")
        return
    mode = CROSS_PARTITION if (inst.attrs.get("channel_id") or 0) > 0 else CROSS_REPLICA
    count, noun = id_space(mode, devices.replicas, devices.partitions)
    for k, what in ((0, "source"), (1, "target")):
        ids = [p[k] for p in pairs]
        bad = [i for i in ids if i < 0 or (count > 1 and i >= count)]
        if bad:
            yield (inst, "W206", f"{inst.opcode}: the {what} ids of {SEND_RECV_PAIRS} should be in [0, {count}) "
                   f"(the {count} {noun} of {devices.source}), got {bad[0]}", "warning", "frontend_attributes")
            return
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            yield (inst, "W206", f"{inst.opcode}: each {what} should appear once in {SEND_RECV_PAIRS}, got "
                   f"{_ids(twice)} more than once", "warning", "frontend_attributes")
            return
    top = max((max(p) for p in pairs), default=0)
    if count == 1 and top >= 1 and (devices.declares(noun) or top >= devices.run_count(noun)):
        why = (f"{devices.source} has 1 {noun[:-1]}" if devices.declares(noun)
               else _no_count_hint(noun, top + 1, devices))
        yield (inst, "W206", f"{inst.opcode}: {SEND_RECV_PAIRS} names {noun} up to {top}, but {why}", "warning",
               "frontend_attributes")


def _ids(ids) -> str:
    shown = ", ".join(map(str, ids[:8]))
    return shown + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")


# ------------------------------------------------------------------------------------------ sharding

def sharding_devices(devices: Devices) -> int | None:
    """The device count shardings are validated against: XLA's InstructionVerifier uses
    num_partitions when the module is SPMD-partitioned and num_partitions > 1 (the text does not
    say whether it is; a tiled sharding with more than one partition is taken to be SPMD)."""
    return devices.partitions if devices.known and devices.partitions > 1 else None


def _sharding_findings(inst: Instruction, sharding, shape: Shape, devices: Devices):
    found = _validate(sharding, shape, sharding_devices(devices))
    if found is None:
        return
    code, msg = found
    if code == "W206":
        # XLA's verifier asks a tiled sharding to use exactly num_partitions devices only when the
        # module is SPMD-partitioned, which its text does not say: a warning
        yield (inst, code, f"{inst.opcode}: the sharding {sharding} {msg} (XLA's verifier rejects this in an "
               "SPMD-partitioned module)", "warning", "sharding")
    else:
        yield (inst, code, f"{inst.opcode}: the sharding {sharding} {msg}", "error", "sharding")


def _frontend(inst: Instruction) -> dict:
    fa = inst.attrs.get("frontend_attributes")
    items = getattr(fa, "items", None) or ()
    return dict(items() if callable(items) else items)


def _sdy_text(inst: Instruction) -> str | None:
    return _frontend(inst).get("xla.sdy.sharding")


def _first_line(e: Exception) -> str:
    return str(e).partition("\n")[0]


def _sdy_findings(inst: Instruction, shape: Shape, module: Module):
    """A Shardy sharding (`xla.sdy.sharding` frontend attribute) should read (its mesh and axes
    exist) and fit the shape, as Shardy's import and HloSharding::Validate ask.  XLA's verifier does
    not read frontend attributes, so these are warnings (W207); `hlo run` needs them to place a
    parameter's pieces or run a shard_map region."""
    from ..topology.sharding import ShardingError, instruction_sharding
    try:
        sharding = instruction_sharding(inst, module)
    except ShardingError as e:
        msg = _first_line(e)
        if msg.startswith(inst.name + ": "):
            msg = msg[len(inst.name) + 2:]
        yield (inst, "W207", f"{inst.opcode}: xla.sdy.sharding: {msg}", "warning", "frontend_attributes")
        return
    if sharding is None:
        return
    found = _validate(sharding, shape, None)
    if found is not None and found[0] == "C136":
        yield (inst, "W207", f"{inst.opcode}: xla.sdy.sharding, read as {sharding}, {found[1]}", "warning",
               "frontend_attributes")


def _leaf_count(shape: Shape) -> int:
    if shape.tuple_shapes is None or shape.element_type == "buffer":
        return 1
    return sum(_leaf_count(s) for s in shape.tuple_shapes)


def _leaves(shape: Shape):
    if shape.tuple_shapes is None or shape.element_type == "buffer":
        yield shape
        return
    for s in shape.tuple_shapes:
        yield from _leaves(s)


def _validate(sharding, shape: Shape, num: int | None) -> tuple[str, str] | None:
    """XLA's HloSharding::Validate: None when valid, else (code, what is wrong)."""
    if shape.element_type == "token":
        return None
    if sharding.kind == "tuple":
        if shape.tuple_shapes is None or shape.element_type == "buffer":
            return "C136", f"must not be a tuple sharding for the array shape {shape.to_str(False)}"
        n = _leaf_count(shape)
        if len(sharding.elements) != n and not (n == 0 and len(sharding.elements) == 1):
            return "C136", (f"must have one sharding per leaf of {shape.to_str(False)} ({n}), "
                            f"got {len(sharding.elements)}")
        for k, (elem, leaf) in enumerate(zip(sharding.elements, _leaves(shape))):
            found = _validate_leaf(elem, leaf, num)
            if found is not None:
                return found[0], f"(element {k}, {elem}) {found[1]}"
        return None
    # XLA's parser gives every leaf of a tuple shape a non-tuple sharding (NormalizeTupleSharding)
    for leaf in _leaves(shape):
        found = _validate_leaf(sharding, leaf, num)
        if found is not None:
            return found
    return None


def _validate_leaf(s, leaf: Shape, num: int | None) -> tuple[str, str] | None:
    if leaf.element_type == "token" or s.kind in ("replicated", "manual", "unknown", "unreduced", "raw"):
        return None
    if s.kind == "tuple":
        return "C136", f"must not be a tuple sharding for the array shape {leaf.to_str(False)}"
    if s.kind == "maximal":
        return _in_range(s.device, num)
    ta = s.tile_assignment
    if ta is None:
        return None
    if _product(ta.dims) == 1:
        return "C136", ("must assign more than one device (a single-device tile assignment: write {replicated} or "
                        "{maximal device=N})")
    data_rank = len(ta.dims) - (1 if s.last_tile_dim_replicate else 0) - len(s.last_tile_dims)
    if data_rank != leaf.rank:
        return "C136", (f"must tile as many dimensions as the shape has ({leaf.rank} for {leaf.to_str(False)}), "
                        f"got {data_rank}")
    if ta.iota is not None:
        n = _product(ta.iota.reshape_dims)
        if num is not None and n != num:
            return "W206", f"should use all {num} devices (num_partitions), got {n}"
        return None
    seen: set[int] = set()
    for d in ta.devices or ():
        found = _in_range(d, num)
        if found is not None:
            return found
        if d in seen:
            return "C136", f"must name each device once, got device {d} twice"
        seen.add(d)
    if num is not None and len(seen) != num:
        return "W206", f"should use all {num} devices (num_partitions), got {len(seen)}"
    return None


def _in_range(device: int | None, num: int | None) -> tuple[str, str] | None:
    if device is None:
        return None
    if device < 0:
        return "C136", f"must name devices >= 0, got {device}"
    if num is not None and device >= num:
        return "C136", f"must name devices below {num} (num_partitions), got device {device}"
    return None


def _product(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n
