"""The devices of one run spread over the actors of a Ray cluster (`hlo run --cluster ray`).

What moves where:

* the driver (the `hlo` process) parses and checks the module, reads every input file's header,
  places the devices (below) and starts one *device actor* per group of devices, plus one
  *coordinator* actor; it never reads the inputs' data;
* each device actor reads the inputs for its own devices only: an `.npy` file (or an `.npz` member
  stored uncompressed) is memory-mapped and cut by the parameter's sharding, so a process holds
  its devices' tiles and never a global array it does not need (a compressed member, a value to
  convert or a snapshot's arguments are read whole first);
* each device actor walks the program for its devices with the same SPMD evaluator, rules and
  compiled paths as a local run (spmd.py); its values never leave it except at collectives and
  send/recv, where it hands its rows to the coordinator and waits for its rows of the result;
* the coordinator meets the actors at every collective (keyed by the instruction and how many times
  each actor reached it), computes the collective on the rows of every device of the groups with
  the local backend's code (collectives.py), and hands each actor its rows back, so results are
  bit-identical to a local run;
* the driver gathers the actors' results (only the entry's result crosses to it), or, when
  nothing needs the values in the driver (`keep_results`: `hlo run` without --print, --expect,
  --reference), the actors keep them and send summaries (io.RowSummary per device), then write
  their devices' tiles or rows of --output into the file in place (memory-mapped; write_pieces),
  so no process holds a global array;
* --profile: each actor profiles its devices (profiling.Profile, as a local run), the driver adds
  the reports up (merged_profile); the progress line: each actor's heartbeat carries where its
  walk is (interpreter/watch.sample), the driver shows the walk of the actor furthest behind
  (merged_sample), polled by the display through the coordinator (`positions`).

Collectives go through Ray's object store and a coordinator, not Ray's collective groups
(ray.util.collective): its CPU backend needs PyTorch (gloo through torch.distributed), its reductions
are SUM/PRODUCT/MIN/MAX instead of any `to_apply` computation, its groups are fixed sets of actors
(here one actor holds several devices and replica groups cut across actors), and its ring algorithm
adds in another order than the local backend's, which changes float bits (measured: half of 65536
f32 sums over 8 devices differ in their last bits), breaking bit-identical results.

Placement: the devices of the grid are cut into contiguous groups, one actor per node by default
(`actors`), each node getting as many devices as its memory (Ray's `memory` resource of that node)
holds by the memory estimate per device (interpreter/memory.py); a program the cluster cannot
hold is refused before anything runs (HloMemoryLimitError, exit code 5, with the numbers).

Failures: an actor that dies (killed, out of memory, its node lost) ends the run with an
HloResourceError/HloEvalError naming its devices, its node and the instruction it was last seen
at, within about a second of Ray noticing; the other actors are killed, nobody waits at a
collective forever: when every actor still running waits at a collective that cannot complete
(devices that diverged), the coordinator fails it with the local backend's divergence error.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import HloError, HloEvalError, HloInputError, HloMemoryLimitError, HloResourceError
from ..devices.manual import JOIN_TARGETS
from ..devices.spmd import Spmd
from ..devices.values import Grouped, Stacked, Uniform, grouped, leaves, take

ENV_ADDRESS = "RAY_ADDRESS"
HEARTBEAT_S = 0.5
# Ray reads this once, when it is imported: "0" keeps a cluster of this machine on the loopback
# address (127.0.0.1) instead of the machine's network address
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only(address: str | None) -> bool:
    """Whether a run joining ADDRESS (None: a new local cluster) stays on this machine."""
    if not address:
        return True
    return address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost")


def require_ray(address: str | None = "unknown"):
    """The `ray` module, or an HloInputError (exit code 2) saying how to install it.  Imported
    for a cluster of this machine alone (ADDRESS None or loopback), Ray stays on the loopback
    address."""
    import sys
    if "ray" not in sys.modules and address != "unknown" and loopback_only(address):
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise HloInputError("--cluster ray needs Ray: pip install 'hlo-cli[ray]'") from None
    return ray


# ----------------------------------------------------------------------------- inputs read by the actors

@dataclass(frozen=True)
class FileInput:
    """An entry parameter's array to be read where it is used: `path` (an .npy file, or an .npz
    archive with member `key`), already checked against the parameter's placement by its header."""
    path: str
    key: str | None
    what: str


def open_array(src: FileInput) -> np.ndarray:
    """The array of SRC, memory-mapped when its bytes lie uncompressed in the file (an .npy file, a
    stored .npz member), else read."""
    from .io import ArrayFile
    if src.key is None:
        try:
            return np.load(src.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError):
            pass
    else:
        mapped = _map_member(src.path, src.key)
        if mapped is not None:
            return mapped
    with ArrayFile(src.path, src.what) as af:
        return af.load(src.key)


def _map_member(path: str, key: str):
    """An .npz member stored without compression, memory-mapped (None when it cannot be)."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as z:
            try:
                info = z.getinfo(key + ".npy")
            except KeyError:
                info = z.getinfo(key)
            if info.compress_type != zipfile.ZIP_STORED:
                return None
            with open(path, "rb") as f:
                f.seek(info.header_offset)
                head = f.read(30)
                if head[:4] != b"PK\x03\x04":
                    return None
                name_len = int.from_bytes(head[26:28], "little")
                extra_len = int.from_bytes(head[28:30], "little")
                start = info.header_offset + 30 + name_len + extra_len
                f.seek(start)
                version = np.lib.format.read_magic(f)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read(f)
                offset = f.tell()
        if dtype.hasobject:
            return None
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                         order="F" if fortran else "C")
    except (KeyError, OSError, ValueError, zipfile.BadZipFile):
        return None


# ----------------------------------------------------------------------------- placement

@dataclass(frozen=True)
class Node:
    id: str
    address: str
    memory: int | None          # bytes of Ray's `memory` resource (None: not declared)
    cpus: float


@dataclass(frozen=True)
class Placement:
    groups: tuple[tuple[int, ...], ...]      # the devices of each actor
    nodes: tuple[Node, ...]                  # the node of each actor
    per_device: int                          # estimated bytes one device needs
    constants: int                           # estimated bytes every actor holds once

    def describe(self) -> list[str]:
        from ..interpreter.memory import human
        from ..devices.values import devices_text
        return [f"actor {k}: devices {devices_text(g)} on node {n.address} "
                f"(estimated {human(self.constants + self.per_device * len(g))})"
                for k, (g, n) in enumerate(zip(self.groups, self.nodes))]


def cluster_nodes(ray) -> list[Node]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources") or {}
        mem = res.get("memory")
        out.append(Node(n["NodeID"], n.get("NodeManagerAddress", "?"), int(mem) if mem else None,
                        float(res.get("CPU", 0))))
    out.sort(key=lambda n: n.id)
    return out


def place(module, grid, nodes: Sequence[Node], actors: int | None = None, check_memory: bool = True) -> Placement:
    """Devices of GRID cut into contiguous groups over NODES (one actor per node by default, or
    ACTORS actors), each node holding at most what its memory holds by the estimate per device."""
    from ..interpreter.memory import estimate, human
    if not nodes:
        raise HloInputError("the Ray cluster has no live node")
    est = estimate(module, 1)
    per = max(est.total - est.constants, 1)
    const = est.constants
    count = grid.count
    n_actors = min(count, actors if actors else len(nodes))
    # how many devices each node can hold
    cap = []
    for nd in nodes:
        if nd.memory is None or not check_memory:
            cap.append(count)
        else:
            cap.append(max((nd.memory - const) // per, 0) if nd.memory > const else 0)
    if sum(min(c, count) for c in cap) < count:
        lines = [f"the run needs an estimated {human(per)} per device, {human(per * count + const)} for its "
                 f"{count} devices, more than the Ray cluster's nodes hold:"]
        lines += [f"  node {nd.address}: {human(nd.memory) if nd.memory is not None else 'unknown'} "
                  f"({min(c, count)} devices)" for nd, c in zip(nodes, cap)]
        lines.append("add nodes or memory to the cluster, or run fewer devices (--replicas/--partitions)")
        raise HloMemoryLimitError("\n".join(lines), estimate=est, limit=sum(nd.memory or 0 for nd in nodes),
                                  total=per * count + const)
    # actors spread over the nodes in turn, as many per node as the node can take
    actor_nodes: list[int] = []
    k = 0
    while len(actor_nodes) < n_actors:
        usable = [i for i, c in enumerate(cap) if c > 0]
        actor_nodes.append(usable[k % len(usable)])
        k += 1
    actor_nodes.sort()
    # devices: even shares, then moved off actors whose node cannot hold them
    share = [count // n_actors + (1 if a < count % n_actors else 0) for a in range(n_actors)]
    left = {i: c for i, c in enumerate(cap)}
    for a, i in enumerate(actor_nodes):
        take_here = min(share[a], left[i])
        if take_here < share[a]:
            extra = share[a] - take_here
            share[a] = take_here
            for b in range(n_actors):               # give the rest to actors on nodes with room
                j = actor_nodes[b]
                room = left[j] - (share[b] if b > a else 0)
                if b != a and room > 0 and extra:
                    more = min(room, extra)
                    share[b] += more
                    extra -= more
        left[i] -= share[a]
    groups, start = [], 0
    for s in share:
        groups.append(tuple(range(start, start + s)))
        start += s
    keep = [(g, nodes[i]) for g, i in zip(groups, actor_nodes) if g]
    return Placement(tuple(g for g, _ in keep), tuple(n for _, n in keep), per, const)


# ----------------------------------------------------------------------------- the coordinator

def _merge(parts: list[tuple[tuple[int, ...], Any]]):
    """(devices in id order, one value stacked over them) from per-actor stacked values."""
    devs = [d for ds, _ in parts for d in ds]
    order = np.argsort(np.asarray(devs, dtype=np.int64), kind="stable")
    values = [v for _, v in parts]

    def join(*xs):
        if isinstance(xs[0], (tuple, list)):
            return type(xs[0])(join(*[x[k] for x in xs]) for k in range(len(xs[0])))
        if isinstance(xs[0], np.ndarray):
            return np.concatenate([np.asarray(x) for x in xs], axis=0)[order]
        return xs[0]                                # tokens
    return tuple(sorted(devs)), join(*values)


def _rows(value, all_devs: tuple[int, ...], mine: tuple[int, ...]):
    pos = {d: i for i, d in enumerate(all_devs)}
    idx = np.asarray([pos[d] for d in mine], dtype=np.intp)

    def cut(x):
        if isinstance(x, (tuple, list)):
            return type(x)(cut(y) for y in x)
        return x[idx] if isinstance(x, np.ndarray) else x
    return cut(value)


class Coordinator:
    """Meets the device actors at collectives and send/recv (a Ray async actor, kept for the next
    run of the same process: `reset` starts a run)."""

    def __init__(self):
        self.pending: dict = {}
        self.state: dict = {}
        self.seen: dict = {}

    async def reset(self, module, grid, options, owners: dict, n_actors: int):
        self.module = module
        self.grid = grid
        self.insts = module_instructions(module)
        self.owners = owners                       # device -> actor
        self.n_actors = n_actors
        self.pending: dict = {}                    # key -> {"parts": {actor: (devs, payload)}, ...}
        self.state = {a: "running" for a in range(n_actors)}
        self.seen: dict = {}                       # actor -> what it was last seen doing
        self.samples: dict = {}                    # actor -> where its walk is (the progress line)
        return True

    async def meet(self, actor: int, kind: str, key: tuple, devs: tuple, payload, extra=None):
        """Actor ACTOR's rows of collective (or send/recv, shard_map join) KEY: (instruction name,
        how many times the actor has reached it).  The devices of disjoint groups may meet apart."""
        entry = self.pending.get(key)
        if entry is None:
            entry = self.pending[key] = {"parts": {}, "futures": {}, "kind": kind, "extra": extra,
                                         "t": time.monotonic()}
        fut = asyncio.get_running_loop().create_future()
        entry["parts"][actor] = (tuple(devs), payload)
        entry["futures"][actor] = fut
        self.state[actor] = "waiting"
        self.seen[actor] = f"{kind} {key[0]}"
        self._progress()
        r = await fut
        if isinstance(r, BaseException):
            raise r
        return r

    async def finished(self, actor: int):
        self.state[actor] = "finished"
        self.samples[actor] = None
        self._progress()

    async def heartbeat(self, actor: int, where: str, position=None):
        """Actor ACTOR is alive; WHERE: its instruction; POSITION: where its walk is (sample_dict)."""
        if self.state.get(actor) == "running":
            self.seen[actor] = where
        if self.state.get(actor) != "finished":
            self.samples[actor] = position

    async def positions(self):
        """Where every actor's walk is (sample_dict, None for an actor not walking), for the driver's
        progress line."""
        return dict(getattr(self, "samples", {}))

    async def last_seen(self):
        return dict(self.seen)

    # -- completion
    def _needed_actors(self, entry, name: str) -> set:
        running = {a for a, s in self.state.items() if s != "finished"}
        if entry["kind"] != "collective":
            return running | set(entry["parts"])
        from ..topology.grid import collective_groups
        inst = self.insts[name]
        try:
            groups = collective_groups(inst, self.grid, allow_missing=inst.opcode == "collective-broadcast")
        except HloError:
            return running | set(entry["parts"])
        have = {d for ds, _ in entry["parts"].values() for d in ds}
        need = {d for g in groups if have & set(g) for d in g}
        return {self.owners[d] for d in need} | set(entry["parts"])

    def _progress(self):
        while True:
            ready = [(k, e) for k, e in self.pending.items()
                     if e["parts"] and self._needed_actors(e, k[0]) <= set(e["parts"])]
            if ready:
                for k, e in ready:
                    self._compute(k, e)
                continue
            waiting = [(e["t"], k, e) for k, e in self.pending.items() if e["parts"]]
            if waiting and all(s != "running" for s in self.state.values()):
                # every actor waits or has finished: the oldest meeting can never complete; run it
                # with the devices that came (the local backend's divergence error says who is missing)
                _, k, e = min(waiting, key=lambda t: t[0])
                self._compute(k, e)
                continue
            return

    def _compute(self, key, entry):
        """Release a meeting: every participant gets every participant's (devices, [rows ref]) and
        computes the collective itself (the rows travel through Ray's object store, not through
        here)."""
        parts = sorted(entry["parts"].items())
        futures = entry["futures"]
        entry["parts"], entry["futures"] = {}, {}
        if key in self.pending:
            del self.pending[key]                  # late devices of other groups meet anew
        everyone = [(ds, p) for _, (ds, p) in parts]
        for a, _ in parts:            # they go on as soon as they wake: not waiting any more
            if self.state.get(a) != "finished":
                self.state[a] = "running"
            if not futures[a].done():
                futures[a].set_result(everyone)


def meeting_value(module, grid, apply, kind: str, name: str, extra, parts):
    """The value of a meeting (a collective, a send/recv, a shard_map join) over the devices of PARTS
    ((devices, rows) per participant): (devices in id order, the value stacked over them), computed
    with the local backend's code."""
    insts = module_instructions(module)
    all_devs, merged = _merge(parts)
    if kind == "collective":
        from ..devices.collectives import run_collective
        return all_devs, run_collective(insts[name], list(merged), all_devs, grid, apply, module)
    if kind == "join":
        from types import SimpleNamespace

        from ..devices import manual
        joined = manual.run(SimpleNamespace(module=module, grid=grid), insts[name], [Stacked(x) for x in merged],
                            all_devs)
        return all_devs, joined.stacked(len(all_devs))
    from ..devices.collectives import route_send_recv
    return all_devs, route_send_recv(insts[extra], insts[name], merged, all_devs, grid)


_INSTRUCTIONS: list = [None, {}]          # the module of the run this process takes part in, its index


def module_instructions(module) -> dict:
    """Instruction name -> instruction of MODULE (names are unique in a module), for the last module."""
    if _INSTRUCTIONS[0] is not module:
        _INSTRUCTIONS[:] = [module, {i.name: i for c in module.computations for i in c.instructions}]
    return _INSTRUCTIONS[1]


# ----------------------------------------------------------------------------- the device actors

class _ActorDevices:
    """runtime.LocalDevices for the devices of one actor: collectives and send/recv through the
    coordinator."""

    def __init__(self, local, ray, coordinator, actor: int):
        self._local = local
        self._ray = ray
        self._coord = coordinator
        self._actor = actor
        self._counts: dict = {}
        self.grid = local.grid
        self.global_context = local.global_context

    @property
    def loop_iterations(self):
        return self._local.loop_iterations

    @loop_iterations.setter
    def loop_iterations(self, v):
        self._local.loop_iterations = v

    def context(self, d):
        return self._local.context(d)

    def context_loop_iterations(self):
        return self._local.context_loop_iterations()

    def executed(self):
        return self._local.executed()

    def meet(self, kind, name, devices, payload, extra=None):
        """This actor's rows of meeting KIND at instruction NAME: its rows go to Ray's object store,
        the coordinator says who met, every participant computes the meeting from all the rows."""
        ray = self._ray
        n = self._counts[(kind, name)] = self._counts.get((kind, name), 0) + 1
        mine = ray.put(payload)
        try:
            parts = ray.get(self._coord.meet.remote(self._actor, kind, (name, n), tuple(devices), [mine], extra))
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        rows = ray.get([p[0] for _, p in parts])
        ec = self.global_context
        all_devs, value = meeting_value(ec.module, self.grid, ec.apply, kind, name, extra,
                                        [(ds, r) for (ds, _), r in zip(parts, rows)])
        return _rows(value, all_devs, tuple(devices))

    def exchange(self, inst, operands, devices):
        return self.meet("collective", inst.name, devices, list(operands))

    def route(self, send_inst, recv_inst, value, devices):
        return self.meet("route", recv_inst.name, devices, value, send_inst.name)


class DeviceActor:
    """A group of devices of a run (a Ray actor, kept for the next run of the same process:
    `setup` starts a run)."""

    def __init__(self):
        self.where = "starting"
        self.coord = None
        self.actor = None
        self.prof = None
        self.run_s = 0.0
        self._walking = None                    # the thread running the walk, while it runs
        self._stop = threading.Event()
        self._beating = False

    def setup(self, module, grid, devices: tuple[int, ...], options, coordinator, actor: int,
              compiled: bool = True, fail_at: str | None = None, check_finite: bool = False,
              dump: dict | None = None, profile: bool = False) -> str:
        """Take devices DEVICES of a run of MODULE; returns this actor's node id.  CHECK_FINITE: stop
        at the first instruction that makes a NaN or Inf on one of these devices (finite.py).  DUMP:
        write every executed instruction's value for these devices (dumps.Dumper's arguments: dir,
        pattern, summary_only, run_info), file names prefixed by the actor.  PROFILE: time these
        devices' instructions as `hlo run --profile` does (profile_summary)."""
        import dataclasses

        import ray
        from .finite import FiniteGuard
        from ..interpreter.evaluator import RunOptions
        from ..devices import context_hooks
        from ..devices.runtime import LocalDevices
        self.module = module
        self.grid = grid
        self.devs = tuple(devices)
        self.actor = actor
        self.coord = coordinator
        self.fail_at = fail_at
        self.guard = FiniteGuard(module) if check_finite else None
        self.dumper = None
        if dump is not None:
            from pathlib import Path

            from .dumps import Dumper
            self.dumper = Dumper(module, Path(dump["dir"]), dump.get("pattern"), dump.get("summary_only", False),
                                 dump.get("run_info"), prefix=f"a{actor}_")
        hooks = [h for h in (self.dumper, self.guard) if h is not None]   # the order `hlo run` uses
        self.hook = None if not hooks else hooks[0] if len(hooks) == 1 else _all_hooks(hooks)
        self.prof = None
        if profile:                                 # as pipeline/core.py profiles a local run
            from ..interpreter.profiling import Profile
            self.prof = Profile()
            options = dataclasses.replace(options or RunOptions(), profile=self.prof)
            if self.hook is not None:
                self.hook = self.prof.hook(self.hook)
        local = LocalDevices(module, grid, options or RunOptions(), context_hooks(self.hook), compiled)
        self.devices = _ActorDevices(local, ray, coordinator, actor)
        self.args = None
        self.where = "starting"
        if not self._beating:
            self._beating = True
            threading.Thread(target=self._beat, daemon=True).start()
        return ray.get_runtime_context().get_node_id()

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if self.coord is not None:
                    self.coord.heartbeat.remote(self.actor, self.where, self.position())
            except Exception:                       # noqa: BLE001 (the driver notices a dead coordinator)
                return

    def position(self):
        """Where this actor's walk is (sample_dict), or None when it is not walking."""
        tid = self._walking
        if tid is None:
            return None
        from ..interpreter.watch import sample
        return sample_dict(sample(tid))

    def profile_summary(self):
        """The profile of this actor's last run (profiling.Profile.summary, every row), or None."""
        if self.prof is None:
            return None
        return self.prof.summary(self.run_s, top=1 << 30)

    def load(self, sources, per_device: bool, global_values: bool) -> int:
        """The entry arguments of this actor's devices from SOURCES (one per parameter: a FileInput
        read here, or a DeviceValue already cut to these devices); returns the bytes held."""
        from ..devices.inputs import distribute
        self.where = "reading inputs"
        values = [open_array(s) if isinstance(s, FileInput) else s for s in sources]
        self.args = distribute(self.module, values, self.grid, per_device, global_values, devices=self.devs)
        return int(sum(np.asarray(a).nbytes for v in self.args for a in leaves(v.value)))

    def peak_rss(self) -> int:
        """The most memory this actor's process has held (bytes)."""
        import resource
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def run(self, keep: bool = False):
        """This actor's devices' share of the run: the entry root's value over its devices; KEEP:
        the value stays here (write_tiles), a Kept summary of it is returned instead."""
        from ..interpreter.allocator import keep_freed_memory
        from ..interpreter.memory import preflight, resource_error
        from ..interpreter.parallel import blas_single
        from .finite import NonFinite
        preflight(self.module, len(self.devs))
        keep_freed_memory()
        walk = ActorWalk(self.module, self.devices, self.hook, None)
        walk.actor = self
        vals = [grouped_rows(a, len(self.devs)) for a in self.args]
        self._walking = threading.get_ident()
        if self.prof is not None and self.hook is None:
            self.prof.start_sampling(self._walking)
        t0 = time.perf_counter()
        try:
            with blas_single():
                value = walk.call(self.module.entry, vals, self.devs)
        except NonFinite:
            # where this actor's devices first made a NaN or Inf, and how far the walk had come (the
            # actors run the same program in the same order: the smallest count is the first)
            return NonFiniteAt(self.guard.report, walk.executed), walk.executed, self._entries()
        except MemoryError as e:
            raise resource_error(None, e) from e
        finally:
            self._walking = None
            self.run_s = time.perf_counter() - t0
            if self.prof is not None:
                self.prof.stop_sampling()
            self.coord.finished.remote(self.actor)
            self.where = "finished"
        if isinstance(value, Grouped):
            value = Stacked(value.value)
        self.kept = value if keep else None
        if keep:
            value = self._summary(value)
        return value, walk.executed + self.devices.executed(), self._entries()

    def _rows(self, value):
        """(array leaves of VALUE, each over this actor's devices on a leading axis, or held once)."""
        from .io import leaves_with_shapes
        n, once = len(self.devs), isinstance(value, Uniform)
        for v, s in leaves_with_shapes(value.value, self.module.entry_computation.root_instruction.shape):
            v = np.asarray(v)
            if not once and (v.ndim != s.rank + 1 or v.shape[0] != n):
                v = np.broadcast_to(v, (n,) + v.shape)
            yield v, once

    def _summary(self, value) -> "Kept":
        from .io import summarize_row
        leaves = []
        for v, once in self._rows(value):
            leaves.append([summarize_row(v)] * len(self.devs) if once else [summarize_row(r) for r in v])
        return Kept(isinstance(value, Uniform), leaves)

    def write_tiles(self, k: int, path: str, pieces) -> int:
        """Write result leaf K of the kept value into the .npy file PATH (made by the driver, of the
        global shape), mapped: PIECES, (device, where) of this actor's devices, where: [(start, stop)]
        per dimension, None for the whole array, or an int: the row of the file's leading axis (a
        stack over the devices).  Returns the bytes written."""
        from .io import storable
        v, once = list(self._rows(self.kept))[k]
        out = np.lib.format.open_memmap(path, mode="r+")
        done = 0
        for d, bounds in pieces:
            row = storable(np.asarray(v if once else v[self.devs.index(d)], order="C"))
            if bounds is None:
                out[...] = row
            elif isinstance(bounds, int):
                out[bounds] = row
            else:
                out[tuple(slice(a, z) for a, z in bounds)] = row[tuple(slice(0, z - a) for a, z in bounds)]
            done += row.nbytes
        out.flush()
        del out
        return done

    def drop_kept(self):
        self.kept = None

    def kept_value(self):
        return self.kept

    def sees(self, path: str, size: int) -> bool:
        try:
            return os.path.getsize(path) == size
        except OSError:
            return False

    def _entries(self):
        return None if self.dumper is None else self.dumper.entries


# ----------------------------------------------------------------------------- progress and profiles, gathered

def sample_dict(smp) -> dict | None:
    """A watch.Sample as plain data for the driver (instructions by name: the driver has the module)."""
    if smp is None:
        return None
    lv = smp.compiling
    return {"levels": [(x.computation, x.index, x.count, getattr(x.instruction, "name", None), x.devices,
                        x.iteration, x.trips) for x in smp.levels],
            "executed": smp.executed, "loop_iterations": smp.loop_iterations,
            "compiling": None if lv is None else (lv.computation, lv.index, lv.count)}


def merged_sample(positions: dict, module, devices: int):
    """The progress line's watch.Sample of a run on Ray from every actor's sample_dict: the walk of
    the actor furthest behind (the run cannot end before it), with the instructions executed and
    loop iterations of all actors, over all DEVICES; None when no actor walks."""
    from ..interpreter.watch import Level, Sample
    found = [p for p in positions.values() if p]
    if not found:
        return None
    slow = min(found, key=lambda p: p["executed"])
    insts = module_instructions(module)
    levels = [Level(c, k, n, insts.get(name) if name else None, d, it, trips)
              for c, k, n, name, d, it, trips in slow["levels"]]
    comp = slow["compiling"]
    return Sample(levels, sum(p["loop_iterations"] for p in found), sum(p["executed"] for p in found), devices,
                  None if comp is None else Level(*comp))


def merged_profile(docs: list, groups, wall_s: float, top: int) -> dict:
    """One `--profile` document (profiling.Profile.summary's form) from the actors' own (each with
    every row): an instruction's calls and times added over the actors, against the actors' time
    added (`run_ms`: actor-seconds; `wall_ms`: the run's own time), so that the shares add up as a
    local run's do."""
    docs = [d for d in docs if d]
    run_ms = sum(d["run_ms"] for d in docs)
    rows: dict = {}
    for d in docs:
        for r in d["top_instructions"]:
            key = (r["computation"], r["instruction"], r["opcode"], tuple(r.get("members") or ()))
            m = rows.get(key)
            if m is None:
                m = rows[key] = dict(r, self_ms=0.0, total_ms=0.0, calls=None if r["calls"] is None else 0)
                m.pop("samples", None)
            m["self_ms"] += r["self_ms"]
            m["total_ms"] += r["total_ms"]
            if r["calls"] is not None:
                m["calls"] = (m["calls"] or 0) + r["calls"]
            if r.get("samples"):
                m["samples"] = m.get("samples", 0) + r["samples"]

    def pct(ms):
        return round(100.0 * ms / run_ms, 2) if run_ms else 0.0
    ranked = sorted(rows.values(), key=lambda r: (-r["self_ms"], r["computation"], r["instruction"]))
    ops: dict = {}
    for r in ranked:
        r.update(self_ms=round(r["self_ms"], 3), total_ms=round(r["total_ms"], 3), percent=pct(r["self_ms"]))
        o = ops.setdefault(r["opcode"], {"opcode": r["opcode"], "instructions": 0, "calls": 0, "self_ms": 0.0})
        o["instructions"] += 1
        o["calls"] += r["calls"] or 0
        o["self_ms"] += r["self_ms"]
        if r.get("samples"):
            o["samples"] = o.get("samples", 0) + r["samples"]
    opcodes = sorted(ops.values(), key=lambda o: -o["self_ms"])
    for o in opcodes:
        o.update(self_ms=round(o["self_ms"], 3), percent=pct(o["self_ms"]))
    timed = sum(r["self_ms"] for r in ranked)
    prepared: dict = {}
    for d in docs:
        for p in d["preparing_top"]:
            prepared[p["computation"]] = prepared.get(p["computation"], 0.0) + p["ms"]
    modes = sorted({d["mode"] for d in docs}) or ["steps"]
    return {"mode": f"{' / '.join(modes)}; {len(docs)} Ray actors, their times added",
            "run_ms": round(run_ms, 3), "wall_ms": round(wall_s * 1e3, 3), "timed_ms": round(timed, 3),
            "untimed_ms": round(max(0.0, run_ms - timed), 3),
            "preparing_ms": round(sum(d["preparing_ms"] for d in docs), 3),
            "preparing_top": [{"computation": k, "ms": round(v, 3)}
                              for k, v in sorted(prepared.items(), key=lambda kv: -kv[1])[:10]],
            "instructions_timed": len(ranked), "top_instructions": ranked[:top], "opcodes": opcodes,
            "actors": [{"devices": list(g), "run_ms": d["run_ms"]} for g, d in zip(groups, docs)]}


@dataclass(frozen=True)
class Kept:
    """An actor's result left with it (run(keep=True)): per result leaf, per device of the actor a
    devices.RowSummary; `once`: the actor holds one value for all its devices."""
    once: bool
    leaves: list


@dataclass(frozen=True)
class NonFiniteAt:
    """An actor's devices made a NaN or Inf (--check-finite): the guard's report, and how many
    instructions the actor's walk had executed then."""
    report: dict
    executed: int


def _all_hooks(hooks):
    def hook(ev):
        for h in hooks:
            h(ev)
    return hook


class ActorWalk(Spmd):
    """The SPMD walk of one actor's devices: it says where it is (heartbeats, failure injection), and
    the joins of shard_map regions, which need other devices' pieces, meet like a collective."""
    actor = None

    def step(self, inst, rule, operands, devs):
        a = self.actor
        a.where = f"{inst.opcode} {inst.name}"
        if a.fail_at is not None:
            _maybe_fail(a.fail_at, inst, a.devs)
        return Spmd.step(self, inst, rule, operands, devs)

    def _shard_call(self, inst, operands, devs):
        if inst.attrs.get("custom_call_target") not in JOIN_TARGETS:
            return Spmd._shard_call(self, inst, operands, devs)
        n = len(devs)
        rows = self.devices.meet("join", inst.name, devs, [o.stacked(n) for o in operands])
        return grouped(Stacked(rows), n)


def grouped_rows(a, n: int):
    return grouped(a, n) if isinstance(a, Stacked) else a


def _maybe_fail(spec: str, inst, devs):
    """Failure injection (tests): FAIL_AT "NAME[@DEVICE]" makes the process of the actor holding
    DEVICE (default: device 0) exit at once when it reaches instruction NAME."""
    name, _, dev = spec.partition("@")
    if inst.name == name and int(dev or 0) in devs:
        time.sleep(3 * HEARTBEAT_S)         # as if the instruction worked a while (the heartbeat tells)
        os._exit(17)


# ----------------------------------------------------------------------------- the driver

@dataclass
class RayRun:
    """What a run on Ray reports besides its result."""
    placement: Placement
    started_cluster: bool
    timings: dict = field(default_factory=dict)
    peak_rss: list = field(default_factory=list)     # per actor: the most memory its process held
    dump_entries: list | None = None                 # --dump-dir: the manifest's instructions, all actors'
    profile: dict | None = None                      # --profile: the actors' profiles, merged_profile
    kept: list | None = None                         # keep_results: each actor's Kept summary
    handles: list | None = None                      # keep_results: the actors keeping them

    def to_dict(self) -> dict:
        """For `hlo run --format json`: where the devices ran and how long each phase took."""
        p = self.placement
        return {"backend": "ray", "started_cluster": self.started_cluster,
                "actors": [{"devices": list(g), "node": n.address, "node_id": n.id,
                            "estimated_bytes": p.constants + p.per_device * len(g),
                            "peak_rss_bytes": rss}
                           for g, n, rss in zip(p.groups, p.nodes, self.peak_rss or [None] * len(p.groups))],
                "timings": dict(self.timings)}


def connect(address: str | None = None, *, num_cpus: int | None = None):
    """Join the cluster at ADDRESS ('auto': a running one; default $RAY_ADDRESS), or start a local one
    for this process.  Returns (ray, started: bool)."""
    address = address or os.environ.get(ENV_ADDRESS) or None
    ray = require_ray(address)
    if ray.is_initialized():
        return ray, False
    kwargs = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                  configure_logging=True)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=num_cpus or os.cpu_count(), **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise HloInputError(f"--cluster ray: cannot reach the Ray cluster at {address or 'a new local one'}: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return ray, not address


_POOL: dict = {}          # this process's actors, kept between runs: "coord", node id -> [actors]


def _pool(ray):
    """The coordinator and the device actors this process started, dropped when the cluster changed."""
    session = ray.get_runtime_context().gcs_address
    if _POOL.get("session") != session:
        _POOL.clear()
        _POOL["session"] = session
    return _POOL


def forget_actors(ray=None):
    """Kill and forget the actors kept for later runs (after a failure, or to free the cluster)."""
    ray = ray or require_ray()
    for h in [_POOL.get("coord")] + [a for k, v in _POOL.items() if k.startswith("node:") for a in v]:
        if h is not None:
            try:
                ray.kill(h, no_restart=True)
            except Exception:                       # noqa: BLE001 (already gone)
                pass
    _POOL.clear()


def _actors_for(ray, pool, plan: Placement):
    """One actor per group of PLAN on its node: kept ones first, new ones started."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    if pool.get("coord") is None:
        pool["coord"] = ray.remote(num_cpus=0, max_concurrency=1000)(Coordinator).remote()
    cls = ray.remote(num_cpus=0, max_restarts=0)(DeviceActor)
    used: dict = {}
    handles = []
    for node in plan.nodes:
        have = pool.setdefault("node:" + node.id, [])
        k = used.get(node.id, 0)
        if k >= len(have):
            have.append(cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False)).remote())
        handles.append(have[k])
        used[node.id] = k + 1
    return pool["coord"], handles


def run_on_ray(module, args, grid, options=None, *, address: str | None = None, actors: int | None = None,
               per_device: bool = False, global_values: bool | None = None, compiled: bool = True,
               check_memory: bool = True, timeout_s: float | None = None, fail_at: str | None = None,
               check_finite: bool = False, dump: dict | None = None, profile: bool = False,
               profile_top: int = 15, progress=None, keep_results: bool = False):
    """Run MODULE's entry computation on every device of GRID, the devices spread over Ray actors.
    ARGS: one per entry parameter, a FileInput (read by each actor for its devices) or a DeviceValue
    (Uniform, Stacked over all devices). Returns (DeviceResult, RayRun).  Results are bit-identical
    to devices.run_devices.  The actors are kept for the next run of this process (forget_actors).
    CHECK_FINITE: stop at the first instruction that makes a NaN or Inf (finite.NonFinite, whose
    `report` is finite.FiniteGuard's, with the device).  DUMP: every actor writes its devices' values
    into DUMP["dir"] (a directory every node reaches), and RayRun.dump_entries (NonFinite.dump_entries)
    is the manifest's instruction list (dumps.merge_device_entries).  PROFILE: every actor profiles
    its devices, RayRun.profile (NonFinite.profile) is merged_profile's document with PROFILE_TOP
    instructions.  PROGRESS: called with a function giving where the run is (a watch.Sample, or
    None) once the actors run, and with None when they stop (the progress line of `hlo run`).
    KEEP_RESULTS: the result stays on the actors (written by them: write_pieces); the DeviceResult's
    value is None and RayRun.kept holds each actor's summaries of its devices' values."""
    from ..topology import partitioned
    from ..devices import DeviceResult
    from ..interpreter.evaluator import RunOptions
    from ..interpreter.excess_precision import prepare as prepare_excess_precision
    from ..interpreter.hoist import hoist_loop_invariants
    from ..devices.inputs import values_are_global

    ray, started = connect(address)
    options = options or RunOptions()
    if global_values is None:
        global_values = values_are_global(module)
    from ..interpreter.ops.numerics import settle as settle_numerics
    module = prepare_excess_precision(module)
    if compiled and not check_finite and dump is None:
        module = hoist_loop_invariants(module)
    module, _, _ = settle_numerics(module, options.numerics)       # the run's arithmetic, as run_devices
    plan = place(module, grid, cluster_nodes(ray), actors, check_memory)
    owners = {d: a for a, g in enumerate(plan.groups) for d in g}
    t0 = time.perf_counter()
    ok = False
    try:
        coord, handles = _actors_for(ray, _pool(ray), plan)
        mod_ref = ray.put(module)
        ray.get(coord.reset.remote(mod_ref, grid, options, owners, len(plan.groups)))
        _wait_all(ray, [h.setup.remote(mod_ref, grid, g, options, coord, a, compiled, fail_at, check_finite, dump,
                                       profile)
                        for a, (h, g) in enumerate(zip(handles, plan.groups))], plan, coord, timeout_s)
        loads = [h.load.remote([s if isinstance(s, FileInput) else _cut(s, g) for s in args], per_device,
                               global_values) for h, g in zip(handles, plan.groups)]
        _wait_all(ray, loads, plan, coord, timeout_s)
        t1 = time.perf_counter()
        runs = [h.run.remote(keep_results) for h in handles]
        if progress is not None:
            progress(_positions_of(ray, coord, module, grid.count))
        try:
            results = _wait_all(ray, runs, plan, coord, timeout_s, finite=check_finite)
        finally:
            if progress is not None:
                progress(None)
        t2 = time.perf_counter()
        entries = None if dump is None else _dump_entries(plan, results)
        profiled = None if not profile else merged_profile(
            _each(ray, [h.profile_summary.remote() for h in handles]), plan.groups, t2 - t1, profile_top)
        stops = [v for v, _, _ in results if isinstance(v, NonFiniteAt)]
        if stops:
            from .finite import NonFinite
            e = NonFinite()
            e.report = min(stops, key=lambda s: (s.executed, s.report.get("device", 0))).report
            e.dump_entries = entries
            e.profile = profiled
            raise e
        ok = True
    except HloError as e:
        # an error of the module (the actors are sound): keep them when every one has stopped
        # (the coordinator releases the others as they wait in vain), else nothing is left running
        if isinstance(e, HloResourceError) or not _all_stopped(ray, locals().get("runs")):
            forget_actors(ray)
        ok = True
        raise
    finally:
        if not ok:                                  # an actor lost, Ctrl-C: nothing is left running
            forget_actors(ray)
    rss = _each(ray, [h.peak_rss.remote() for h in handles])
    values = [v for v, _, _ in results]
    executed = sum(n for _, n, _ in results)
    devs = tuple(range(grid.count))
    timings = {"ray_setup_s": t1 - t0, "ray_run_s": t2 - t1, "ray_gather_s": time.perf_counter() - t2}
    if keep_results:
        once = all(v.once for v in values) and all(
            len({v.leaves[k][0].digest for v in values}) == 1 for k in range(len(values[0].leaves)))
        result = DeviceResult(None, devs, grid, once and not partitioned(module), executed)
        return result, RayRun(plan, started, timings, rss, entries, profiled, values, handles)
    value = _gathered(values, plan)
    result = DeviceResult(value, devs, grid, isinstance(value, Uniform) and not partitioned(module), executed)
    timings["ray_gather_s"] = time.perf_counter() - t2
    return result, RayRun(plan, started, timings, rss, entries, profiled)


def _gathered(values, plan: Placement):
    """One value over all devices from each actor's value over its devices."""
    # a value each actor holds once is the same on every device only when the actors agree bit for bit
    if all(isinstance(v, Uniform) for v in values) and all(_same_bits(v.value, values[0].value) for v in values):
        return values[0]
    _, merged = _merge([(g, v.stacked(len(g))) for g, v in zip(plan.groups, values)])
    return Stacked(merged)


def gather_kept(run: RayRun):
    """The value the actors of RUN kept, brought here (one value over all devices)."""
    ray = require_ray()
    return _gathered(_wait_all(ray, [h.kept_value.remote() for h in run.handles], run.placement, None, None),
                     run.placement)


def all_see(run: RayRun, path: str) -> bool:
    """Whether every actor of RUN sees the file PATH this process made (the same size): a file
    system they share with this process."""
    size = os.path.getsize(path)
    try:
        return all(_wait_all(require_ray(), [h.sees.remote(path, size) for h in run.handles], run.placement,
                             None, None))
    except HloError:
        return False


def write_pieces(run: RayRun, k: int, path: str, pieces) -> None:
    """Have the actors that kept RUN's result write its leaf K into the .npy file PATH (made of the
    global shape): PIECES, (device, bounds or None) as DeviceActor.write_tiles takes them, each
    written by the actor holding its device."""
    ray = require_ray()
    owner = {d: a for a, g in enumerate(run.placement.groups) for d in g}
    mine: dict = {}
    for d, bounds in pieces:
        mine.setdefault(owner[d], []).append((d, bounds))
    _wait_all(ray, [run.handles[a].write_tiles.remote(k, path, p) for a, p in sorted(mine.items())],
              Placement(tuple(run.placement.groups[a] for a in sorted(mine)),
                        tuple(run.placement.nodes[a] for a in sorted(mine)), 0, 0), None, None)


def release_kept(run: RayRun) -> None:
    """The actors drop the results they kept (after they were written)."""
    if run.handles:
        _each(require_ray(), [h.drop_kept.remote() for h in run.handles])


def _each(ray, refs, within_s: float = 30.0) -> list:
    """The values of REFS (reports of the actors: a peak, a profile), None for those that fail."""
    try:
        return ray.get(refs, timeout=within_s)
    except Exception:                               # noqa: BLE001 (a report only)
        return [None] * len(refs)


def _positions_of(ray, coord, module, devices: int):
    """A function giving where the run is now (merged_sample of the actors' last heartbeats), or
    None when the coordinator does not answer within a second (never an error)."""
    def where():
        try:
            return merged_sample(ray.get(coord.positions.remote(), timeout=1.0), module, devices)
        except Exception:                           # noqa: BLE001 (the display must never stop the run)
            return None
    return where


def _dump_entries(plan: Placement, results) -> list:
    from .dumps import merge_device_entries
    return merge_device_entries([(g, r[2] or []) for g, r in zip(plan.groups, results)])


def _outcomes(ray, refs) -> list:
    """Each finished ref's value, or the exception it raised."""
    out = []
    for r in refs:
        try:
            out.append(ray.get(r, timeout=0))
        except Exception as e:                      # noqa: BLE001 (reported by the caller)
            out.append(e)
    return out


def _all_stopped(ray, refs, within_s: float = 10.0) -> bool:
    if not refs:
        return True
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=within_s)
    return not pending


def _same_bits(a, b) -> bool:
    la, lb = leaves(a), leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.asarray(x).shape == np.asarray(y).shape
        and np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in zip(la, lb))


def _cut(value, devs: tuple[int, ...]):
    """A DeviceValue given for every device, cut to the rows of DEVS."""
    if isinstance(value, Uniform):
        return value
    if isinstance(value, Grouped):
        value = Stacked(value.value)
    if isinstance(value, Stacked):
        return take(value, list(devs))
    return Uniform(value)


def _wait_all(ray, refs, plan: Placement, coord, timeout_s, finite: bool = False):
    """The values of REFS (one per actor) in order; the first failure ends the run with an error
    naming the actor's devices, node and where it was.  FINITE: an error of the module waits for the
    other actors, one of which may have stopped at a NaN first (that is what the run reports; the
    others then fail at the collective it left)."""
    from ..devices.values import devices_text
    index = {r: k for k, r in enumerate(refs)}
    pending = list(refs)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        done, pending = ray.wait(pending, num_returns=1, timeout=wait)
        for r in done:
            try:
                ray.get(r)
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                if not isinstance(cause, BaseException):
                    cause = HloEvalError(f"a device actor failed: {e}")
                if finite and isinstance(cause, HloError) and _all_stopped(ray, refs):
                    outcomes = _outcomes(ray, refs)
                    if any(isinstance(v, tuple) and isinstance(v[0], NonFiniteAt) for v in outcomes):
                        # every actor's outcome, those the stopped one left failing as empty ones
                        return [v if isinstance(v, tuple) else (None, 0, None) for v in outcomes]
                raise cause from None
            except ray.exceptions.RayActorError as e:
                k = index[r]
                try:
                    seen = ray.get(coord.last_seen.remote(), timeout=5).get(k, "?")
                except Exception:                   # noqa: BLE001
                    seen = "?"
                why = "out of memory" if isinstance(e, getattr(ray.exceptions, "OutOfMemoryError", ())) \
                    else "its process died"
                at = f"while at {seen}" if seen != "?" else "before it reported where it was"
                raise HloResourceError(
                    f"the Ray actor running devices {devices_text(plan.groups[k])} on node "
                    f"{plan.nodes[k].address} was lost ({why}) {at}; the run is stopped "
                    f"(no result was written)", instruction=seen.split(" ")[-1] if seen != "?" else None) from None
        if deadline is not None and time.monotonic() > deadline and pending:
            raise HloEvalError(f"the run on Ray did not finish within {timeout_s:g} s")
    return [ray.get(r) for r in refs]
