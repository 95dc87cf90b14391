"""The inputs of a run, gathered in one place: `--input [NAME=]FILE.npy` files and `--inputs ARGS.npz`
archives (every header checked against its parameter before its data is read), the arguments an
HloSnapshot holds, and the snapshot's stored result as a reference.  The checks and conversions of
one value against its parameter (interpreter/inputs.py: coerce, check_header, assign) and the
placement of global values on devices (devices/inputs.py) are the layers below.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HloInputError
from ..interpreter.inputs import assign, check_header, coerce, label
from .io import ArrayFile, flatten_arrays


def _fail(msg: str):
    raise HloInputError(msg)


# ----------------------------------------------------------------------------- inputs of a run

def require_inputs(params, ways: str = "--input/--inputs, or --random-inputs") -> None:
    """An HloInputError naming PARAMS (and WAYS to give them) when they take values and none were given."""
    if any(p.shape.element_type != "token" for p in params):
        _fail(f"the entry computation takes {len(params)} parameter{'s' if len(params) != 1 else ''} ("
              + ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params) + f"); pass {ways}")


@dataclass
class Inputs:
    """The values for the entry parameters, where each came from, and the notes to show."""
    values: list
    sources: list = field(default_factory=list)   # [{"parameter", "number", "file"}] for the JSON
    paths: set = field(default_factory=set)       # resolved paths read (never to be overwritten)
    notes: list = field(default_factory=list)     # casts and other things worth saying (stderr)


def load_inputs(params, specs=(), archive: str | None = None, shape_for=None, read: bool = True) -> Inputs:
    """Values for the entry parameters PARAMS from `--input [NAME=]FILE.npy` SPECS (in parameter
    order first, then by name) and an `--inputs ARGS.npz` ARCHIVE.  Every file's header is checked
    against its parameter (shape, and whether its type can be converted) before its data is read;
    every problem is an HloInputError naming the option, the file and the parameter.
    SHAPE_FOR(k, dims, what), when given, is the Shape an array of DIMS must have to be the input of
    parameter K (a multi-device run takes global or stacked arrays; see devices/inputs.py).
    READ False checks every header and leaves the data where it is: the values are
    devices.ray_backend.FileInput's, for the processes that read their part (a snapshot's arguments
    are always read)."""
    param_names = {p.name for p in params}
    positional, named = [], {}            # (ArrayFile, key, origin) entries
    opened = []
    result = Inputs([])
    try:
        for spec in specs:
            name, eq, path = spec.partition("=")
            if not eq or (name not in param_names and not re.fullmatch(r"arg\d+", name) and Path(spec).is_file()):
                name, path = None, spec
            if not path:
                _fail(f"--input {spec}: no file given")
            af = ArrayFile(path, f"--input {spec}")
            opened.append(af)
            result.paths.add(str(Path(os.path.realpath(path))))
            if af.is_archive:
                _fail(f"--input {spec}: {path} is an .npz archive; pass it with --inputs")
            if name is None:
                if named:
                    _fail(f"--input {spec}: inputs in parameter order must come before NAME=FILE inputs")
                positional.append((af, None, path))
            else:
                if name in named:
                    _fail(f"--input {spec}: input '{name}' is given twice")
                named[name] = (af, None, path)
        if archive and (Path(archive).suffix.lower() in (".pb", ".pbtxt", ".textproto")
                        or Path(archive).name.lower().endswith("snapshot.txt")):
            return _snapshot_inputs(params, archive, specs, result, shape_for)
        if archive:
            af = ArrayFile(archive, f"--inputs {archive}")
            opened.append(af)
            result.paths.add(str(Path(os.path.realpath(archive))))
            if not af.is_archive:
                _fail(f"--inputs {archive}: {archive} is a single array, not an .npz archive")
            for key in af.headers:
                if key in named:
                    _fail(f"input '{key}' is given by both --input and --inputs")
                named[key] = (af, key, f"{archive}[{key}]")
        pos_to, named_to = assign(params, len(positional), list(named))
        jobs = [(k, entry) for k, entry in zip(pos_to, positional)] + [(named_to[key], entry)
                                                                      for key, entry in named.items()]
        values = [None] * len(params)
        for k, (af, key, origin) in jobs:
            p = params[k]
            what = f"{label(p)} (from {origin})"
            header = af.headers[key]
            shape = p.shape if shape_for is None else shape_for(k, header.shape, what)
            if check_header(header, shape, what) and not read:
                from .ray_backend import FileInput
                values[k] = FileInput(str(Path(af.path).resolve()), key, what)
            elif check_header(header, shape, what):
                values[k] = coerce(af.load(key), shape, what, notes=result.notes, allow_rounding=True)
            result.sources.append({"parameter": p.name, "number": p.parameter_number, "file": origin})
        from ..interpreter.values import TOKEN
        result.values = [TOKEN if v is None else v for v in values]
        result.sources.sort(key=lambda s: s["number"])
        return result
    finally:
        for af in opened:
            af.close()


def _snapshot_inputs(params, path: str, specs, result: Inputs, shape_for) -> Inputs:
    """`--inputs SNAPSHOT.pb`: the arguments an HloSnapshot (--xla_dump_hlo_snapshots) holds, bound
    by position to PARAMS, for any text of the module (the one before optimizations, a pass's)."""
    from ..sources.proto import read_snapshot
    if specs:
        _fail(f"--inputs {path}: the arguments of a snapshot cannot be combined with --input")
    snap = read_snapshot(path)
    if not snap.arguments:
        _fail(f"--inputs {path}: this proto holds no arguments (an HloSnapshot, module_NNNN.NAME.snapshot.N.pb "
              f"from XLA_FLAGS=--xla_dump_hlo_snapshots, has them)")
    if shape_for is None:
        values = snapshot_arguments(snap, params, result.notes)
    else:
        if len(snap.arguments) != len(params):
            snapshot_arguments(snap, params, result.notes)        # raises, naming both counts
        values = []
        for k, (a, p) in enumerate(zip(snap.arguments, params)):
            what = f"{label(p)} (argument {k} of {path})"
            values.append(coerce(a, shape_for(k, tuple(getattr(a, "shape", ())), what), what, notes=result.notes))
    result.values = list(values)
    result.paths.add(str(Path(os.path.realpath(path))))
    result.sources = [{"parameter": p.name, "number": p.parameter_number, "file": f"{path}[arg{k}]"}
                      for k, p in enumerate(params)]
    return result


# ----------------------------------------------------------------------------- HloSnapshot runs

def snapshot_arguments(snap, params, notes: list | None = None) -> list:
    """The arguments stored in SNAP (sources.proto.Snapshot) bound to the entry parameters PARAMS,
    checked as --input files are (interpreter.inputs.coerce); an HloInputError names the argument."""
    args = list(snap.arguments)
    if len(args) != len(params):
        raise HloInputError(f"{snap.source.file}: the snapshot holds {len(args)} argument"
                            f"{'s' if len(args) != 1 else ''}, the entry computation takes {len(params)} "
                            f"parameter{'s' if len(params) != 1 else ''}")
    return [coerce(a, p.shape, f"parameter {p.parameter_number} '{p.name}' (argument {k} of the snapshot)",
                   notes=notes)
            for k, (a, p) in enumerate(zip(args, params))]


def snapshot_reference(snap) -> dict:
    """The snapshot's stored result as --expect's reference: keys out0, out1, ... over its array
    leaves, depth-first (tokens left out)."""
    leaves = flatten_arrays(snap.result)
    return {f"out{k}": a for k, a in enumerate(leaves)}


# ----------------------------------------------------------------------------- the arguments of diff and the tools

def global_parameters(module) -> list:
    """The entry parameters as the arrays a user gives see them: a module after SPMD partitioning
    takes each parameter's global array (split by its sharding), so its shape is the global one."""
    from ..topology import grid_of
    from ..devices import needs_devices
    from ..devices.inputs import global_parameters as on_devices
    from ..devices.inputs import values_are_global
    if values_are_global(module) or not needs_devices(module, grid_of(module)):
        return module.entry_computation.parameters
    return on_devices(module)


def read_arguments(module, inputs=(), inputs_npz: str | None = None, random_inputs: bool = False, seed: int = 0,
                   note=lambda text: None) -> list:
    """The arguments of MODULE, read as `hlo run` reads them, as global arrays (a module on several
    devices takes global arrays, split by each parameter's sharding when it runs): `hlo diff` and the
    tools run on them.  NOTE hears what is worth saying (conversions)."""
    from ..interpreter.inputs import random_inputs as make_random
    from .devices import DeviceRun
    params = module.entry_computation.parameters
    if random_inputs:
        if inputs or inputs_npz:
            _fail("--random-inputs cannot be combined with --input/--inputs")
        return make_random(global_parameters(module), seed)
    if not inputs and not inputs_npz:
        require_inputs(params)
    dv = DeviceRun(module, {})
    loaded = load_inputs(params, inputs, inputs_npz, dv.shape_for if dv.multi else None)
    for n in loaded.notes:
        note(f"note: {n}")
    return loaded.values


def arguments_of(module, path: str, inputs=(), inputs_npz: str | None = None, random_inputs: bool = False,
                 seed: int = 0, note=lambda text: None) -> tuple:
    """(the arguments, the snapshot PATH is or None): read_arguments's; a snapshot given as the
    module (PATH) supplies its arguments when no inputs are given."""
    from .prepare import snapshot_of
    snap = None
    if not inputs and not inputs_npz and not random_inputs:
        snap = snapshot_of(path)
        if snap is not None:
            inputs_npz = path
            note(f"note: inputs: the arguments recorded in {path}")
    return read_arguments(module, inputs, inputs_npz, random_inputs, seed, note), snap
