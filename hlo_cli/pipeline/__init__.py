"""The run pipeline (layer 7: above the interpreter and devices, below the tools and the CLI).

source -> module -> check -> memory budget -> inputs -> execute (one device, the local devices, or a
Ray cluster) -> outputs, dumps, comparison, finite checks, timings: what `hlo run` does, as a
library call.  The CLI (cli/run.py) maps its options to a RunRequest and prints the RunResult.

    from hlo_cli.pipeline import RunRequest, run, classify_error
    from hlo_cli.errors import HloError

    try:
        result = run(RunRequest("samples/jax/mlp_forward.hlo", random_inputs=True, seed=1))
    except HloError as e:                    # located (e.diagnostics: file, line, column)
        code, message = classify_error(e)    # the exit code and message `hlo run` ends with
    else:
        for value, shape in result.leaves:   # numpy arrays and their HLO shapes
            print(shape.to_str(False), value.mean())
        result.timings["execute_s"], result.exit_code

Modules of the package: core (RunRequest, RunResult, RunHooks, run), prepare (check, elided
constants, snapshots), inputs (input files, archives, snapshot arguments), io (arrays in and out),
devices (a multi-device run's inputs and results), ray_backend (the devices on a Ray cluster),
dumps (--dump-dir), finite (--check-finite), compare (--expect), support (what hlo can run).
"""
from .core import (DeviceOptions, DumpOptions, Reference, RunHooks, RunRequest, RunResult, classify_error,
                   error_document, run)

__all__ = ["DeviceOptions", "DumpOptions", "Reference", "RunHooks", "RunRequest", "RunResult", "classify_error",
           "error_document", "run"]
