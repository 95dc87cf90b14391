"""`hlo info`'s summary of a module: its signature, opcodes, source files, custom-call targets (and
whether hlo runs them), devices and collectives, parameters' shardings, and the memory a run is
estimated to need.  cli/info.py prints it."""
from __future__ import annotations

import json
from collections import Counter

from ..ir.opcodes import COLLECTIVE, DEVICE_ID, STRUCTURAL, with_trait


def summarize(module, path: str, size: int) -> dict:
    entry = module.entry_computation
    params = entry.parameters
    insts = [i for c in module.computations for i in c.instructions]     # (one walk for the passes below)
    counts = Counter(i.opcode for i in insts)
    n_instr = len(insts)
    called_by_fusion = {c for i in insts if i.opcode == "fusion" for c in i.called_computations}
    frames = module.stack_frames
    # instructions whose metadata resolves to each source file
    per_file: Counter = Counter()
    source_of: dict = {}          # metadata text -> source file (the same texts repeat many times)
    for inst in insts:
        md = inst.attrs.get("metadata")
        if md is None:
            continue
        src = source_of.get(md.text, False)
        if src is False:
            src = None
            fid = md.stack_frame_id
            if fid and frames:
                stack = frames.resolve(fid)
                if stack:
                    src = stack[0][0]
            if src is None and md.source_file:
                src = md.source_file
            source_of[md.text] = src
        if src is not None:
            per_file[src] += 1
    sources = sorted(set(frames.file_names.values()) | set(per_file))
    out = {
        "file": path,
        "bytes": size,
        "module": module.name,
        "entry": entry.name,
        "parameters": [{"name": p.name, "number": p.parameter_number, "shape": str(p.shape)} for p in params],
        "result": str(entry.root_instruction.shape),
        "signature": "(" + ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params) + ") -> "
                     + entry.root_instruction.shape.to_str(False),
        "computations": len(module.computations),
        "fusion_computations": len(called_by_fusion),
        "instructions": n_instr,
        "header": {k: _text(v) for k, v in module.attrs.items()},
        "opcodes": dict(counts.most_common()),
        "sources": [{"file": f, "instructions": per_file.get(f, 0)} for f in sources],
    }
    out["custom_calls"] = custom_call_summary(module)
    devices = device_summary(module)
    if devices is not None:
        out["devices"] = devices
    out.update(memory_summary(module, devices))
    return out


def custom_call_summary(module) -> list[dict]:
    """The module's custom-call targets (in order of first call): how many calls, whether hlo runs
    it (asked of the custom-call registry), what it is, where it is first called."""
    from ..pipeline.support import custom_calls
    out = []
    for u in custom_calls(module):
        i = u.first
        out.append({"target": u.target, "count": u.count, "runnable": u.runnable, "what": u.what,
                    "first": f"{i.loc.file}:{i.loc.line}:{i.loc.column}", "instruction": i.name})
    return out


def memory_summary(module, devices: dict | None) -> dict:
    """{"inputs_bytes": the entry parameters' bytes (one device's), "memory": what a run is
    estimated to need (interpreter.memory.estimate; on the devices `hlo run` would simulate)}."""
    from ..interpreter.memory import estimate, result_bytes
    inputs = sum(result_bytes(p.shape) or 0 for p in module.entry_computation.parameters)
    count = 1
    if devices is not None and devices["count"] > 1:
        try:
            from ..topology import grid_of
            from ..devices import needs_devices
            grid = grid_of(module)
            count = grid.count if needs_devices(module, grid) else 1
        except Exception:          # noqa: BLE001 -- a module the device layer refuses: one device
            count = 1
    try:
        mem = estimate(module, count).to_dict()
    except RecursionError:
        mem = None
    return {"inputs_bytes": inputs, "memory": mem}


# what exchanges values between devices or names one: the collectives, the device ids, the peers'
# send and recv (the -done halves only end what their -start began)
_COLLECTIVES = (with_trait(COLLECTIVE, DEVICE_ID) | frozenset({"send", "recv"})) - with_trait(STRUCTURAL)


def device_summary(module) -> dict | None:
    """The devices of a multi-device module: replicas x partitions (and where the counts come
    from), its Shardy meshes, each kind of collective with how many there are and their group sizes
    in devices, and the entry parameters' shardings with global and per-device shapes.  None for a
    module that neither runs on several devices nor has collectives or shardings."""
    from ..checker.devices import module_devices
    from ..topology import partitioned
    from ..topology.sharding import ShardingError, parameter_sharding, sdy_meshes
    from ..errors import HloError
    from ..shapes.families.collective import device_group_sizes
    devs = module_devices(module)
    try:
        meshes = sdy_meshes(module)
    except HloError:
        meshes = {}
    kinds: dict[str, dict] = {}
    for _, inst in module.instructions():
        if inst.opcode not in _COLLECTIVES:
            continue
        k = kinds.setdefault(inst.opcode, {"opcode": inst.opcode, "count": 0, "group_sizes": set()})
        k["count"] += 1
        if inst.opcode in ("collective-permute", "collective-permute-start"):
            k["group_sizes"].add(2)          # a permute moves data between pairs of devices
        elif inst.opcode not in ("send", "recv", "replica-id", "partition-id"):
            k["group_sizes"].update(device_group_sizes(inst.opcode, inst.attrs, devs.run_replicas,
                                                       devs.run_partitions))
    params = []
    per_device = partitioned(module)
    for p in module.entry_computation.parameters:
        try:
            sharding = parameter_sharding(p, module)
        except (ShardingError, HloError):
            sharding = None
        if sharding is None and p.attrs.get("sharding") is None:
            continue
        entry = {"name": p.name, "number": p.parameter_number,
                 "sharding": str(sharding if sharding is not None else p.attrs.get("sharding"))}
        entry.update(_global_and_local(p.shape, sharding, per_device))
        params.append(entry)
    if devs.count <= 1 and not kinds and not params and not meshes:
        return None
    return {"replicas": devs.run_replicas, "partitions": devs.run_partitions, "count": devs.count,
            "from": devs.source if devs.count > 1 or devs.known else "XLA's default (the header gives no count)",
            "meshes": [{"name": name, "axes": dict(m.axes), "size": m.size} for name, m in meshes.items()],
            "collectives": [dict(k, group_sizes=sorted(k["group_sizes"])) for k in kinds.values()],
            "parameters": params}


def _global_and_local(shape, sharding, per_device: bool) -> dict:
    """{"global_shape", "per_device_shape"} of an array parameter with a tiled sharding: in a
    partitioned module the declared shape is a device's (the global one is the tiles put together,
    padding included); before partitioning it is the global shape (a device's is ceil(dim / tiles))."""
    from ..topology.sharding import ShardingError, layout
    from ..ir.shape import Shape
    if shape is None or shape.is_tuple or sharding is None or sharding.kind == "tuple":
        return {}
    try:
        tiles = layout(sharding, shape.rank).tiles
    except (ShardingError, ValueError):
        return {}
    if per_device:
        local = shape.dims
        glob = tuple(d * t for d, t in zip(shape.dims, tiles))
    else:
        glob = shape.dims
        local = tuple(-(-d // t) for d, t in zip(shape.dims, tiles))
    def text(dims):
        return Shape.array(shape.element_type, tuple(dims)).to_str(False)
    return {"global_shape": text(glob), "per_device_shape": text(local)}


def _text(v):
    from ..ir.attributes import attr_text
    return attr_text(v)


def cached_summary(src, size: int, use_cache: bool = True) -> dict:
    """summarize's document for the module source SRC (of a file of SIZE bytes), as JSON gives it
    back: it depends on the text, its file name and size alone, so a repeat reads it from the cache
    (no parse, no memory estimate)."""
    from ..sources import parse_module
    what = json.dumps(["info", size])
    s = None
    if use_cache:
        from ..sources.cache import load_derived
        s = load_derived(src.text, src.file, what)
    if not isinstance(s, dict):
        module = parse_module(src, use_cache)
        s = json.loads(json.dumps(summarize(module, src.file, size)))
        if use_cache:
            from ..sources.cache import store_derived
            store_derived(src.text, src.file, what, s)
    return s


def error_entry(file: str, module, e) -> dict:
    """What --format json gives for a module that cannot be read or parsed (as `hlo run` does)."""
    from ..errors import Diagnostic
    from ..pipeline.core import diagnostic_dict
    diags = e.diagnostics or [Diagnostic(str(e), file, code="E000")]
    return {"file": file, "module": module, "status": "error", "exit_code": int(e.exit_code), "message": str(e),
            "diagnostics": [diagnostic_dict(d) for d in diags]}


def module_entries(fm, use_cache: bool = True) -> tuple[list[dict], list]:
    """(an entry per module of the file FM: its summary, or error_entry's for one that does not
    parse; the errors of those that do not)."""
    from ..errors import HloError
    from ..sources import parse_module
    entries, failed = [], []
    for src in fm.modules:
        try:
            module = parse_module(src, use_cache)
        except HloError as e:
            failed.append(e)
            entries.append(dict(error_entry(src.file, src.name, e), index=src.index, line=src.line))
            continue
        s = summarize(module, src.file, len(src.own_text.encode("utf-8", "replace")))
        entries.append(dict(s, index=src.index, line=src.line, status="ok"))
    return entries, failed


def dump_modules(dd) -> list[dict]:
    """A row per module of the XLA dump directory DD."""
    return [{"key": m.key, "id": m.id, "name": m.name, "timestamp": m.timestamp, "stages": len(m.stages),
             "pass_stages": m.pass_stages, "snapshots": list(m.snapshots)} for m in dd.modules]


def stage_rows(m) -> list[dict]:
    """A row per stage of the dump directory's module M, with whether its text changed from the one before."""
    from ..sources.dumpdir import text_key
    rows, prev = [], None
    for s in m.stages:
        try:
            key = text_key(s.path)
        except OSError:
            key = None
        rows.append(dict(s.to_dict(), changed=prev is None or key is None or key != prev))
        prev = key
    return rows
