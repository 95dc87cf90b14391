"""XLA itself, as a reference: parse and run HLO text with the XLA that JAX ships.

Needs jax and jaxlib (the `test` extra).  Used by the differential tests and the benchmarks.
"""
from __future__ import annotations

import time

import numpy as np


def _jax():
    import jax
    from jax._src.lib import _jax as xla
    from jaxlib import _hlo
    return jax, xla, _hlo


def parse_with_xla(text: str):
    """XLA's HloModule for `text` (raises RuntimeError with XLA's message on bad input)."""
    _, _, _hlo = _jax()
    return _hlo.hlo_module_from_text(text)


def _init_lapack():
    """JAX registers XLA CPU's LAPACK custom calls lazily; modules calling them need it done first."""
    try:
        from jaxlib.lapack import _lapack
        _lapack.initialize()
    except (ImportError, AttributeError):
        pass


class XlaExecutable:
    """An HLO module compiled by XLA CPU; `timings` records parse/compile seconds."""

    def __init__(self, text: str):
        jax, xla, _hlo = _jax()
        if "lapack" in text:
            _init_lapack()
        t0 = time.perf_counter()
        module = _hlo.hlo_module_from_text(text)
        t1 = time.perf_counter()
        stablehlo = xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        self.device = jax.devices("cpu")[0]
        client = self.device.client
        self.executable = client.compile_and_load(stablehlo, xla.DeviceList((self.device,)), xla.CompileOptions())
        t2 = time.perf_counter()
        self.timings = {"parse": t1 - t0, "compile": t2 - t1}

    def __call__(self, args) -> list[np.ndarray]:
        """Run on `args` (arrays in parameter order); returns the result's array leaves, depth-first."""
        import jax
        # 64-bit inputs must reach XLA as they are, whatever JAX's x64 default says
        try:
            ctx = jax.enable_x64(True)
        except (AttributeError, TypeError):
            ctx = None
        if ctx is not None:
            with ctx:
                bufs = [jax.device_put(np.asarray(a), self.device) for a in args]
        else:
            bufs = [jax.device_put(np.asarray(a), self.device) for a in args]
        res = self.executable.execute_sharded(bufs)
        outs = res.disassemble_into_single_device_arrays()
        return [np.asarray(o[0]) for o in outs]


def run_with_xla(text: str, args) -> list[np.ndarray]:
    """Compile `text` with XLA CPU and run it on `args`; the result's array leaves, depth-first."""
    return XlaExecutable(text)(args)


def run_on_devices(text: str, per_device: list, replicas: int, partitions: int) -> list[np.ndarray]:
    """Compile `text` for `replicas` x `partitions` XLA CPU devices (device d = replica x partitions
    + partition) and run it: `per_device[k]` holds parameter k's value for every device, stacked on
    a leading axis; returns each result leaf stacked the same way.  The process must have the host
    devices (XLA_FLAGS=--xla_force_host_platform_device_count=N before jax is imported).  With
    several partitions XLA's SPMD partitioner runs: a per-device program must mark its instructions
    sharding={manual} to stay as written.  Raises what XLA raises for a module it refuses."""
    jax, xla, _hlo = _jax()
    n = replicas * partitions
    devices = jax.devices("cpu")[:n]
    if len(devices) < n:
        raise RuntimeError(f"{n} devices wanted, this process has {len(devices)} (set "
                           f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before importing jax)")
    module = _hlo.hlo_module_from_text(text)
    stablehlo = xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    options = xla.CompileOptions()
    build = options.executable_build_options
    build.num_replicas, build.num_partitions = replicas, partitions
    build.use_spmd_partitioning = partitions > 1
    build.device_assignment = xla.DeviceAssignment.create(np.arange(n).reshape(replicas, partitions))
    exe = devices[0].client.compile_and_load(stablehlo, xla.DeviceList(tuple(devices)), options)
    args = _device_buffers(jax, devices, per_device)
    outs = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    return [np.stack([np.asarray(b) for b in leaf]) for leaf in outs]


# ----------------------------------------------------------------------------- any device count, timed

def compile_for_devices(text: str, replicas: int = 1, partitions: int = 1):
    """Compile `text` with XLA CPU for `replicas` x `partitions` devices (device d = replica x
    partitions + partition); returns (executable, devices, timings with parse_s and compile_s).
    With several partitions XLA's SPMD partitioner runs (Shardy's when the text carries Shardy's
    attributes): a module before partitioning becomes the per-device program.  Raises
    XlaStageError naming the stage (parse, compile, devices) and XLA's message."""
    jax, xla, _hlo = _jax()
    if "lapack" in text:
        _init_lapack()
    n = replicas * partitions
    devices = jax.devices("cpu")[:n]
    if len(devices) < n:
        raise XlaStageError("devices", f"{n} devices wanted, this process has {len(devices)} (set "
                                       f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before importing jax)")
    t0 = time.perf_counter()
    try:
        module = _hlo.hlo_module_from_text(text)
    except Exception as e:                     # noqa: BLE001 -- XLA's message is the report
        raise XlaStageError("parse", str(e)) from None
    t1 = time.perf_counter()
    try:
        stablehlo = xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        options = xla.CompileOptions()
        if n > 1:
            build = options.executable_build_options
            build.num_replicas, build.num_partitions = replicas, partitions
            build.use_spmd_partitioning = partitions > 1
            if partitions > 1 and "xla.sdy." in text:
                build.use_shardy_partitioner = True
            build.device_assignment = xla.DeviceAssignment.create(np.arange(n).reshape(replicas, partitions))
        exe = devices[0].client.compile_and_load(stablehlo, xla.DeviceList(tuple(devices)), options)
    except Exception as e:                     # noqa: BLE001
        raise XlaStageError("compile", str(e)) from None
    t2 = time.perf_counter()
    return exe, devices, {"parse_s": t1 - t0, "compile_s": t2 - t1}


class XlaStageError(RuntimeError):
    """XLA refused a module: `stage` is parse, compile, devices or run; the message is XLA's."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def _block(outs):
    for leaf in outs:
        for b in leaf:
            b.block_until_ready()


def _device_buffers(jax, devices, per_device) -> list:
    """One array per parameter made of each device's own buffer, from arrays stacked over DEVICES
    on a leading axis (declared replicated: XLA only looks at the buffers)."""
    replicated = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("d",)),
                                            jax.sharding.PartitionSpec())
    return [jax.make_array_from_single_device_arrays(np.shape(a)[1:], replicated,
                                                     [jax.device_put(np.asarray(a[i]), d)
                                                      for i, d in enumerate(devices)])
            for a in per_device]


def execute_on_devices(exe, devices, args, mode: str, result_dims=None):
    """Run a compiled executable; returns (result leaves as NumPy arrays, timings with run_s and
    transfer_s).  MODE says what `args` hold and what comes back:
      "single"     one device; arrays in parameter order; results as they are;
      "per_device" each argument stacked over the devices on a leading axis (device-id order);
                   each result leaf stacked the same way;
      "global"     global arrays (a module before partitioning), split by the shardings XLA chose
                   for its parameters; each result leaf reassembled into its global array of
                   dims `result_dims[k]` by the sharding XLA chose for it."""
    import jax
    from jax._src.sharding_impls import GSPMDSharding
    _, xla, _ = _jax()
    t0 = time.perf_counter()
    if mode == "single":
        bufs = [jax.device_put(np.asarray(a), devices[0]) for a in args]
    elif mode == "per_device":
        _check_per_device_shapes(exe, args)
        bufs = _device_buffers(jax, devices, args)
    else:
        dl = xla.DeviceList(tuple(devices))
        shardings = exe.get_parameter_shardings() or [None] * len(args)
        bufs = []
        for a, sh in zip(args, shardings):
            s = GSPMDSharding(dl, sh) if sh is not None else GSPMDSharding.get_replicated(dl)
            bufs.append(jax.device_put(np.asarray(a), s))
    for b in bufs:
        b.block_until_ready()
    t1 = time.perf_counter()
    try:
        res = exe.execute_sharded(bufs)
        outs = res.disassemble_into_single_device_arrays()
        _block(outs)
    except Exception as e:                     # noqa: BLE001
        raise XlaStageError("run", str(e)) from None
    t2 = time.perf_counter()
    if mode == "single":
        results = [np.asarray(leaf[0]) for leaf in outs]
    elif mode == "per_device":
        results = [np.stack([np.asarray(b) for b in leaf]) for leaf in outs]
    else:
        dl = xla.DeviceList(tuple(devices))
        out_shardings = exe.get_output_shardings() or [None] * len(outs)
        results = []
        for k, (leaf, sh) in enumerate(zip(outs, out_shardings)):
            dims = tuple(result_dims[k]) if result_dims is not None and k < len(result_dims) else None
            if sh is None or dims is None:
                results.append(np.asarray(leaf[0]))
                continue
            arr = jax.make_array_from_single_device_arrays(dims, GSPMDSharding(dl, sh), list(leaf))
            results.append(np.asarray(arr))
    t3 = time.perf_counter()
    return results, {"run_s": t2 - t1, "transfer_s": (t1 - t0) + (t3 - t2)}


def _compiled_parameter_dims(exe) -> list | None:
    """Each entry parameter's per-device dims in the compiled program (its entry_computation_layout)."""
    import re
    try:
        head = exe.hlo_modules()[0].to_string()[:200_000]
    except Exception:                          # noqa: BLE001 -- no check then
        return None
    m = re.search(r"entry_computation_layout=\{\((.*?)\)->", head)
    if m is None:
        return None
    return [(t, tuple(int(d) for d in dims.split(",") if d.strip()))
            for t, dims in re.findall(r"(\w+)\[([\d,\s]*)\]", m.group(1))]


def _check_per_device_shapes(exe, args):
    """A program per device must stay as written: XLA's SPMD partitioner (which XLA CPU runs on every
    module of several partitions) may cut an already partitioned program's parameters again."""
    dims = _compiled_parameter_dims(exe)
    if dims is None or len(dims) != len(args):
        return
    for k, ((et, d), a) in enumerate(zip(dims, args)):
        have = tuple(np.shape(a)[1:])
        if d != have:
            raise XlaStageError("compile", f"XLA partitioned this per-device program again: parameter {k} became "
                                           f"{et}[{','.join(map(str, d))}] per device where each device's input is "
                                           f"{et}[{','.join(map(str, have))}] (XLA CPU runs its SPMD partitioner on "
                                           f"every module of several partitions, so a program it has partitioned "
                                           f"already cannot run on it as written)")
