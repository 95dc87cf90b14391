"""The results of a multi-device run, as `hlo run` writes and shows them.

- What `--output` writes (and `--expect` compares with), one array per result leaf, keys out0,
  out1, ...: the leaf stacked on a leading device axis in device-id order (a value every device
  holds identically is repeated); the global array itself when the module computes on global
  values (before partitioning); with `--output-global`, the global array reassembled from the
  devices' tiles by the ROOT's `sharding` (or the one given with `--output-sharding`).
- What the summary shows: one row per leaf and per set of devices holding the same value (bit
  for bit), so that "devices 0-7" is one row when they agree; or one device's rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import HloError, HloInputError
from .io import leaves_with_shapes, row_digest, value_stats
from ..devices.values import Stacked, Uniform, devices_text


def _fail(msg: str):
    raise HloInputError(msg)


def parse_sharding(text: str, module=None, what: str = "--output-sharding"):
    """An HLO sharding written as in a module (`{devices=[2,4]<=[8]}`, `{replicated}`, a tuple
    `{{...}, {...}}`), decoded by the IR's own decoder, or a Shardy one (`#sdy.sharding<@mesh,
    [{"x"}, {}]>`, its mesh from MODULE); an HloInputError if it is not one."""
    from lark.exceptions import UnexpectedInput

    from ..ir.attributes import dec_sharding
    from ..parser.frontend import NestingError, decode_value
    t = text.strip()
    if not t.startswith(("{", "#")):
        t = "{" + t + "}"
    try:
        if t.startswith("#"):
            from ..topology.sharding import sdy_sharding
            return sdy_sharding(t, module)
        return dec_sharding(decode_value("sharding", t))
    except (UnexpectedInput, NestingError, ValueError, HloError) as e:   # (the decoder's AttrError: a ValueError)
        if isinstance(e, UnexpectedInput):
            msg = f"a syntax error at column {getattr(e, 'column', '?')}"
        else:
            lines = (getattr(e, "message", None) or str(e)).strip().splitlines()
            msg = lines[0] if lines else type(e).__name__
        shown = text if len(text) <= 80 else text[:77] + "..."
        _fail(f"{what} {shown!r}: not an HLO sharding ({msg}); write it as in a module, e.g. "
              f"{{devices=[2,1]<=[2]}} or {{replicated}}")


NO_ROOT_SHARDING = ("--output-global: the ROOT of the entry computation has no sharding saying how the devices' "
                    "results make the global one; give it with --output-sharding (e.g. {devices=[2,1]<=[2]})")


def _leaf_shardings(sharding, root_shape) -> list:
    """The sharding of every result leaf that --output writes (tokens left out)."""
    from ..topology.sharding import leaf_shardings
    return [sh for sh, s in zip(leaf_shardings(sharding, root_shape), root_shape.leaves())
            if s.element_type not in ("token", "opaque")]


@dataclass
class DeviceLeaf:
    """One result leaf: its value `stacked` over `devices` (leading axis), or `global_value`; or,
    values left where they were computed, one RowSummary per device (`summaries`, in the order of
    `devices`; `global_value` a RowSummary for a global value)."""
    key: str
    shape: object                      # the leaf's HLO Shape (per device)
    devices: tuple
    stacked: np.ndarray | None = None  # [len(devices), *dims]; None for a global value
    global_value: np.ndarray | None = None
    summaries: list | None = None

    def at(self, device: int) -> np.ndarray:
        if self.summaries is not None:
            return self.summaries[self.devices.index(device)]
        if self.stacked is None:
            return self.global_value
        return self.stacked[self.devices.index(device)]

    def groups(self) -> list[tuple[tuple, np.ndarray]]:
        """(device ids, value) for each set of devices holding the same value, bit for bit,
        in order of their first device; one group for a global value."""
        if self.stacked is None and self.summaries is None:
            return [(self.devices, self.global_value)]
        by_digest: dict[bytes, list] = {}
        firsts = {}
        for pos, d in enumerate(self.devices):
            dig = self.summaries[pos].digest if self.summaries is not None else row_digest(self.stacked[pos])
            by_digest.setdefault(dig, []).append(d)
            firsts.setdefault(dig, pos)
        return [(tuple(devs), self.at(self.devices[firsts[dig]])) for dig, devs in by_digest.items()]


def result_leaves(result, root_shape) -> list[DeviceLeaf]:
    """The leaves of a DeviceResult (its `.value`, `.devices`, `.global_result`), tokens left out."""
    devices = tuple(result.devices)
    value = result.value
    out = []
    if isinstance(value, Uniform):
        for k, (v, s) in enumerate(leaves_with_shapes(value.value, root_shape)):
            v = np.asarray(v)
            if result.global_result:
                out.append(DeviceLeaf(f"out{k}", s, devices, global_value=v))
            else:
                out.append(DeviceLeaf(f"out{k}", s, devices, stacked=np.broadcast_to(v, (len(devices),) + v.shape)))
        return out
    assert isinstance(value, Stacked)
    for k, (v, s) in enumerate(leaves_with_shapes(value.value, root_shape)):
        v = np.asarray(v)
        if v.ndim != s.rank + 1 or v.shape[0] != len(devices):
            v = np.broadcast_to(v, (len(devices),) + v.shape)
        out.append(DeviceLeaf(f"out{k}", s, devices, stacked=v))
    return out


def output_arrays(leaves: list[DeviceLeaf], root_shape, sharding=None, to_global: bool = False,
                  partitions: int | None = None, what: str = "--output-global") -> list[np.ndarray]:
    """The arrays --output writes (and --expect compares with), one per leaf, as the module's
    docstring says.  TO_GLOBAL reassembles by SHARDING (the ROOT's, or --output-sharding's)."""
    if not to_global or all(leaf.stacked is None for leaf in leaves):
        return [leaf.global_value if leaf.stacked is None else leaf.stacked for leaf in leaves]
    if sharding is None:
        _fail(NO_ROOT_SHARDING.replace("--output-global", what))
    from ..devices.inputs import global_dims
    from ..topology.sharding import layout, unshard
    shs = _leaf_shardings(sharding, root_shape)
    out = []
    for leaf, sh in zip(leaves, shs):
        if leaf.stacked is None:
            out.append(leaf.global_value)
            continue
        dims = global_dims(tuple(leaf.shape.dims), sh)
        try:
            lay = layout(sh, leaf.shape.rank)
            # (a sharding naming one device -- replicated -- holds the same on every partition)
            parts = partitions if lay.partitions > 1 or lay.maximal is not None else None
            out.append(np.asarray(unshard(np.asarray(leaf.stacked), sh, dims, devices=leaf.devices,
                                          partitions=parts)))
        except HloInputError:
            raise
        except (HloError, ValueError) as e:
            _fail(f"{what}: cannot reassemble {leaf.key} ({leaf.shape.to_str(False)} on "
                  f"{len(leaf.devices)} devices) by sharding {sh}: {e}")
    return out


def tile_pieces(sharding, dims, devices, partitions: int) -> list[tuple]:
    """(device, [(start, stop)] per dimension, or None for the whole array) of the tiles that make
    the global array of DIMS from the DEVICES' values by SHARDING: each tile taken from the first
    device holding it, as topology.sharding.unshard takes it (a device's partition: its id modulo
    PARTITIONS; a replicated or manual value from the first device, a maximal one from its device)."""
    import math

    from ..topology.sharding import layout
    lay = layout(sharding, len(dims))
    if lay.manual or (lay.maximal is None and lay.partitions == 1):
        return [(devices[0], None)]
    if lay.maximal is not None:
        holder = next((d for d in devices if d % partitions == lay.maximal), None)
        if holder is None:
            _fail(f"--output-global: device {lay.maximal} of the maximal sharding {sharding} is not among the "
                  f"devices {devices_text(devices)}")
        return [(holder, None)]
    if lay.partitions != partitions:
        _fail(f"--output-global: sharding {sharding} names {lay.partitions} devices but the run has "
              f"{partitions} partitions")
    size = [-(-int(g) // t) for g, t in zip(dims, lay.tiles)]
    seen, out = set(), []
    for d in devices:
        key = tuple(int(c) for c in lay.coord[d % partitions])
        if key not in seen:
            seen.add(key)
            out.append((d, [(min(c * n, int(g)), min((c + 1) * n, int(g))) for c, n, g in zip(key, size, dims)]))
    if len(seen) != math.prod(lay.tiles):
        _fail(f"--output-global: devices {devices_text(devices)} do not hold every tile of sharding {sharding}")
    return out


def root_sharding(module):
    """The sharding written on the entry computation's ROOT, or None."""
    return module.entry_computation.root_instruction.attrs.get("sharding")


def check_device(device: int, devices) -> None:
    if device not in tuple(devices):
        _fail(f"--device {device}: the run has devices {devices_text(devices)}")


# ----------------------------------------------------------------------------- a run from the command line

class _NotShared(Exception):
    """The Ray actors do not see the files this process makes (DeviceRun.write_streamed)."""


def _compute(field: str, compute, valid=None):
    return compute()


def _grid(module, opts: dict) -> list:
    from ..topology import grid_of
    g = grid_of(module, opts.get("replicas"), opts.get("partitions"))
    return [g.replicas, g.partitions]


def _is_grid(value) -> bool:
    from .verdicts import is_counts
    return is_counts(value, 2, least=1)


def _needs_devices(module, grid) -> bool:
    from ..devices import needs_devices
    return bool(needs_devices(module, grid))


def _values_are_global(module) -> bool:
    from ..devices.inputs import values_are_global
    return bool(values_are_global(module))


class DeviceRun:
    """What `hlo run`'s device options ask for, decided before anything runs: the grid, whether the
    run takes the multi-device path (`multi`: several devices and a program that needs them, or any
    device option given), how inputs are read and placed, and how results are written."""

    def __init__(self, module, opts: dict, remember=None):
        """REMEMBER(field, compute, valid) gives compute()'s answer, or the one it kept from a run of the
        same text and options (pipeline/verdicts.py's RunVerdicts.get): the facts of the module below."""
        from ..topology.grid import DeviceGrid
        from .verdicts import is_bool
        remember = remember or _compute
        self.module = module
        self.per_device = bool(opts.get("per_device"))
        self.device = opts.get("device")
        self.output_global = bool(opts.get("output_global"))
        given = any(opts.get(k) not in (None, False) for k in ("replicas", "partitions", "per_device",
                                                               "output_global", "output_sharding", "device"))
        self.grid = DeviceGrid(*remember("grid", lambda: _grid(module, opts), _is_grid))
        self.cluster = opts.get("cluster") or "local"
        self.ray_address = opts.get("ray_address")
        self.ray_actors = opts.get("ray_actors")
        self.ray_run = None                        # what the Ray backend reports (placement, timings)
        self.remote_profile = None                 # --profile on Ray: the actors' profiles, merged
        self.watch = None                          # --cluster ray: RunHooks.watch, when a person watches
        # the results are wanted in this process (--print), not only summarized (--cluster ray)
        self.values_here = opts.get("values_here", True) is not False
        self.keep = False                          # the result left on the Ray actors (summaries here)
        self.stream_to = None                      # --output written by the Ray actors (write_streamed)
        self.profile_top = 15
        self.multi = given or (self.cluster != "local" and self.grid.count > 1) or remember(
            "needs_devices", lambda: _needs_devices(module, self.grid), is_bool)
        # inputs read by the device actors (each its devices' part) rather than by this process
        self.remote = self.multi and self.cluster == "ray"
        self.global_values = remember("global_values", lambda: _values_are_global(module), is_bool)
        self.sharding = None
        if not self.multi:
            return
        if self.device is not None:
            check_device(self.device, range(self.grid.count))
        if self.output_global:
            text = opts.get("output_sharding")
            self.sharding = parse_sharding(text, module) if text is not None else root_sharding(module)
            if text is not None:
                self._check_output_sharding(text)
            if self.sharding is None and not self.global_values:
                _fail(NO_ROOT_SHARDING)

    def _check_output_sharding(self, text: str):
        """--output-sharding fits the ROOT and the run's devices, said before anything runs (the
        reassembly after the run would refuse it only then)."""
        from ..errors import HloError
        from ..topology.sharding import layout
        root_shape = self.module.entry_computation.root_instruction.shape
        for leaf, sh in zip(root_shape.leaves(), _leaf_shardings(self.sharding, root_shape)):
            if leaf.element_type in ("token", "opaque"):
                continue
            try:
                lay = layout(sh, leaf.rank)
            except (HloError, ValueError) as e:
                _fail(f"--output-sharding {text}: {e}")
            if lay.maximal is None and not lay.manual and lay.partitions > 1 \
                    and lay.partitions != self.grid.partitions:
                _fail(f"--output-sharding {text}: it names {lay.partitions} devices but the run has "
                      f"{self.grid.partitions} partitions ({self.grid.replicas} replicas x {self.grid.partitions})")

    def shape_for(self, k: int, dims, what: str):
        """The Shape an input file of DIMS for entry parameter K must have (io.load_inputs)."""
        from ..devices.inputs import expected_shape
        return expected_shape(self.module, k, dims, self.grid, self.per_device, self.global_values, what)

    def distribute(self, values, notes: list | None = None) -> list:
        from ..devices.inputs import distribute
        if self.remote and any(_is_file_input(v) for v in values):
            return list(values)                   # each actor cuts its devices' part (ray_backend.py)
        return distribute(self.module, values, self.grid, self.per_device, self.global_values, notes)

    def local_arguments(self, values) -> list:
        """VALUES (what `distribute` returned) as a local run holds them: inputs left to the Ray
        actors (FileInputs) read here, memory-mapped where they can be, and placed on the devices
        (for what needs every device's arguments in this process: --reference xla)."""
        if not any(_is_file_input(v) for v in values):
            return list(values)
        from ..devices.inputs import distribute
        from .ray_backend import open_array
        arrays = [open_array(v) if _is_file_input(v) else v for v in values]
        return distribute(self.module, arrays, self.grid, self.per_device, self.global_values)

    def random_inputs(self, seed: int) -> list:
        from ..devices.inputs import random_global_inputs
        return random_global_inputs(self.module, self.grid, seed, self.global_values)

    def check_reference(self, path: str):
        """--expect PATH can be read (its arrays are read after the run, when their shapes are known)."""
        from .io import ArrayFile
        with ArrayFile(path, f"--expect {path}"):
            pass

    def run(self, args, options, hook, progress):
        if self.cluster == "ray":
            return self._run_on_ray(args, options, hook)
        from ..devices import run_devices
        return run_devices(self.module, args, self.grid, options, hook, progress)

    def _run_on_ray(self, args, options, hook):
        """The run on Ray: the hooks `hlo run` made (self.dumper, self.guard, set before the run) are
        re-made in each actor for its devices, and their findings brought back to these objects;
        --profile (OPTIONS.profile) is made in each actor too, the actors' profiles merged into
        self.remote_profile; self.watch hears where the actors are (the progress line)."""
        import dataclasses

        from .finite import NonFinite
        from .ray_backend import run_on_ray
        dumper, guard = getattr(self, "dumper", None), getattr(self, "guard", None)
        if hook is not None and dumper is None and guard is None:
            raise ValueError("the Ray backend runs --dump-dir's and --check-finite's hooks only")
        dump = None if dumper is None else {"dir": str(dumper.dir), "pattern": dumper.pattern,
                                            "summary_only": dumper.summary_only, "run_info": dumper.run_info}
        profile = options is not None and options.profile is not None
        if profile:
            options = dataclasses.replace(options, profile=None)      # (each actor makes its own)
        try:
            result, self.ray_run = run_on_ray(self.module, args, self.grid, options, address=self.ray_address,
                                              actors=self.ray_actors, per_device=self.per_device,
                                              global_values=self.global_values, check_finite=guard is not None,
                                              dump=dump, profile=profile, profile_top=self.profile_top,
                                              progress=self.watch, keep_results=self.keep)
        except NonFinite as e:
            self.remote_profile = getattr(e, "profile", None)
            guard.report = e.report              # what `hlo run` reports, as from a local run
            if dumper is not None:
                dumper.entries = e.dump_entries or []
            raise
        if dumper is not None:
            dumper.entries = self.ray_run.dump_entries or []
        self.remote_profile = self.ray_run.profile
        return result

    def leaves(self, result) -> list[DeviceLeaf]:
        if self.ray_run is not None and self.ray_run.kept is not None:
            leaves = self._kept_leaves(result)
            if self.stream_to is None:             # nothing to write: the actors let their values go
                from .ray_backend import release_kept
                release_kept(self.ray_run)
            return leaves
        return result_leaves(result, self.module.entry_computation.root_instruction.shape)

    def _kept_leaves(self, result) -> list[DeviceLeaf]:
        """The leaves of a result the Ray actors kept: a RowSummary per device (one for a global value)."""
        kept, groups = self.ray_run.kept, self.ray_run.placement.groups
        shapes = [s for s in self.module.entry_computation.root_instruction.shape.leaves()
                  if s.element_type not in ("token", "opaque")]
        devices = tuple(result.devices)
        out = []
        for k, s in enumerate(shapes):
            per = {d: kp.leaves[k][i] for kp, g in zip(kept, groups) for i, d in enumerate(g)}
            rows = [per[d] for d in devices]
            out.append(DeviceLeaf(f"out{k}", s, devices, global_value=rows[0]) if result.global_result
                       else DeviceLeaf(f"out{k}", s, devices, summaries=rows))
        return out

    def streamable(self) -> bool:
        """Whether --output can be written by the Ray actors in place (write_streamed): a run on Ray
        whose values are not wanted here (--print), of results whose shapes are static."""
        root_shape = self.module.entry_computation.root_instruction.shape
        return self.multi and self.remote and not self.values_here and \
            not any(s.is_dynamic for s in root_shape.leaves())

    def write_streamed(self, path: str, leaves: list[DeviceLeaf]) -> None:
        """--output PATH written by the Ray actors that kept the result: each array (a global array
        with --output-global, else the leaf stacked over the devices) an .npy file made here and
        filled in place by the actors, each device's tile (or row) by the actor holding it (an .npz
        archive then made of those files, copied in pieces), under a temporary
        name renamed at the end: no process holds a global array, none is left half written.  When
        an actor does not see the files made here (no file system shared with its node), the values
        are brought here and written as without Ray."""
        from pathlib import Path

        from ..devices.inputs import global_dims
        from .io import new_npy, npz_of_npy_files, replace_file_by_name
        from .ray_backend import all_see, release_kept, write_pieces
        root_shape = self.module.entry_computation.root_instruction.shape
        shs = _leaf_shardings(self.sharding, root_shape) if self.sharding is not None else [None] * len(leaves)
        plans = []
        for leaf, sh in zip(leaves, shs):
            first = leaf.global_value if leaf.summaries is None else leaf.summaries[0]
            if leaf.summaries is None:
                plans.append((tuple(leaf.shape.dims), first.dtype, [(leaf.devices[0], None)]))
                continue
            if not self.output_global:             # stacked over the devices, in device order
                plans.append(((len(leaf.devices),) + tuple(leaf.shape.dims), first.dtype,
                              [(d, i) for i, d in enumerate(leaf.devices)]))
                continue
            if self.sharding is None:
                _fail(NO_ROOT_SHARDING)
            dims = global_dims(tuple(leaf.shape.dims), sh)
            plans.append((dims, first.dtype, tile_pieces(sh, dims, leaf.devices, self.grid.partitions)))
        npz = path.endswith(".npz")

        def fill(tmp, parts):
            files = parts if npz else [tmp]
            for k, ((dims, dtype, pieces), f) in enumerate(zip(plans, files)):
                new_npy(f, dims, dtype)
                if k == 0 and not all_see(self.ray_run, str(f)):
                    raise _NotShared()
                write_pieces(self.ray_run, k, str(f), pieces)
            if npz:
                with open(tmp, "wb") as out:
                    npz_of_npy_files(out, {f"out{k}": p for k, p in enumerate(parts)})
        try:
            replace_file_by_name(Path(path), fill, f"--output {path}", parts=len(plans) if npz else 0)
        except _NotShared:
            self._write_gathered(path, all(leaf.summaries is None for leaf in leaves))
        finally:
            release_kept(self.ray_run)

    def _write_gathered(self, path: str, global_result: bool) -> None:
        """--output PATH from the values the Ray actors kept, brought here."""
        from .io import write_results
        from .ray_backend import gather_kept
        from ..devices import DeviceResult
        value = gather_kept(self.ray_run)
        result = DeviceResult(value, tuple(range(self.grid.count)), self.grid, global_result)
        leaves = result_leaves(result, self.module.entry_computation.root_instruction.shape)
        write_results(path, self.output_arrays(leaves))

    def output_arrays(self, leaves: list[DeviceLeaf]) -> list[np.ndarray]:
        root_shape = self.module.entry_computation.root_instruction.shape
        return output_arrays(leaves, root_shape, self.sharding, self.output_global, self.grid.partitions)

    def reference(self, path: str, arrays) -> dict:
        from .compare import load_reference
        return load_reference(path, [tuple(a.shape) for a in arrays])


def _is_file_input(v) -> bool:
    from .ray_backend import FileInput
    return isinstance(v, FileInput)


def leaf_rows(leaves: list[DeviceLeaf], device: int | None = None) -> list[tuple]:
    """(leaf, device ids or None for a global value, value) rows of a summary: one per set of
    devices that agree, or DEVICE's value alone."""
    rows = []
    for leaf in leaves:
        if leaf.stacked is None and leaf.summaries is None:
            rows.append((leaf, None, leaf.global_value))
        elif device is not None:
            rows.append((leaf, (device,), leaf.at(device)))
        else:
            rows.extend((leaf, devs, v) for devs, v in leaf.groups())
    return rows


def results_json(leaves: list[DeviceLeaf], device: int | None = None, literal=None) -> list[dict]:
    """The `results` of `hlo run --format json` on devices: per leaf its key and HLO shape, and for
    each set of devices holding the same value its device ids and statistics ("devices"); a global
    value's statistics as a single-device run gives them; DEVICE's alone when given."""
    stats = value_stats
    out = []
    for leaf in leaves:
        r = {"key": leaf.key, "hlo_shape": leaf.shape.to_str(False)}
        if leaf.stacked is None and leaf.summaries is None:
            r.update(stats(leaf.global_value), **({"literal": literal(leaf.global_value, leaf.shape)}
                                                  if literal else {}))
        elif device is not None:
            v = leaf.at(device)
            r.update(device=device, **stats(v), **({"literal": literal(v, leaf.shape)} if literal else {}))
        else:
            r["devices"] = [dict(devices=list(devs), **stats(v),
                                 **({"literal": literal(v, leaf.shape)} if literal else {}))
                            for devs, v in leaf.groups()]
        out.append(r)
    return out
