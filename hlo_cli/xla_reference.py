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
    # one array per parameter made of each device's own buffer (declared replicated: XLA only looks
    # at the buffers)
    replicated = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("d",)),
                                            jax.sharding.PartitionSpec())
    args = [jax.make_array_from_single_device_arrays(np.shape(a)[1:], replicated,
                                                     [jax.device_put(np.asarray(a[i]), d)
                                                      for i, d in enumerate(devices)])
            for a in per_device]
    outs = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    return [np.stack([np.asarray(b) for b in leaf]) for leaf in outs]
