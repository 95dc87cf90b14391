#!/usr/bin/env python
"""Convert JAX's back-compatibility test data to hlo goldens.

JAX keeps, for every custom call its exported programs may contain, a StableHLO module recorded
on a real machine (CPU, CUDA, ROCm, TPU) with its inputs and the outputs that machine computed
(jax/_src/internal_test_util/export_back_compat_test_data/*.py and pallas/*.py).  For every case
this writes, under OUT (default tests/data/back_compat/):

  NAME.hlo            the module as HLO text (jaxlib's mlir_module_to_xla_computation)
  NAME.inputs.npz     arg0, arg1, ... in parameter order
  NAME.expected.npz   out0, out1, ... the recorded outputs, flattened
  index.json          per case: platform, custom-call targets, date, source, and either
                      "converted" or the reason the conversion failed

NAME is `<module>__<variable>[__<key>]`.  Run it with the jax/jaxlib the project uses:

  python scripts/convert_back_compat.py [OUT]
"""
from __future__ import annotations

import datetime
import importlib
import json
import pkgutil
import re
import sys
from pathlib import Path

import numpy as np


def cases():
    """(name, module name, data dict) of every recorded case."""
    import jax._src.internal_test_util.export_back_compat_test_data as pkg
    mods = [m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.ispkg]
    mods += [f"pallas.{m.name}" for m in pkgutil.iter_modules([str(Path(pkg.__path__[0]) / "pallas")])]
    for mname in sorted(mods):
        mod = importlib.import_module(f"{pkg.__name__}.{mname}")
        for var, val in vars(mod).items():
            yield from _walk(f"{mname.replace('.', '_')}__{var}", mname, val)


def _walk(name, mname, val, depth=0):
    if isinstance(val, dict) and "mlir_module_text" in val and "expected_outputs" in val:
        yield name, mname, val
    elif isinstance(val, dict) and depth < 3:
        for k, v in val.items():
            yield from _walk(f"{name}__{re.sub(r'[^A-Za-z0-9_]+', '_', str(k))}", mname, v, depth + 1)


def to_hlo_text(mlir_text: str) -> str:
    """The module as HLO text, through jaxlib's StableHLO -> HLO converter."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    with mlir.make_ir_context():
        module = ir.Module.parse(mlir_text)
        data = mlir.module_to_bytecode(module)
    return _computation_text(data)


def _computation_text(data: bytes) -> str:
    """HLO text of a StableHLO module (bytecode), every constant printed in full."""
    from jax._src.lib import _jax, hlo
    comp = _jax.mlir.mlir_module_to_xla_computation(data, use_tuple_args=False, return_tuple=False)
    opts = hlo.HloPrintOptions.short_parsable()      # every constant printed in full (as_text's choice)
    opts.print_metadata = False
    return comp.as_hlo_module().to_string(opts)


def refined_hlo_text(d) -> str:
    """A shape-polymorphic module (its `?` dimensions bound by the recorded inputs' shapes): JAX's
    export machinery refines it to static shapes, as JAX's back-compatibility test does when it
    calls the module, and lowers that call to HLO text for the CPU."""
    import jax
    from jax._src import core, tree_util
    from jax._src.export import _export, shape_poly
    main = re.search(r"func\.func public @main\((.*?)\)\s*->", d["mlir_module_text"], re.S).group(1)
    specs, n = [], 0
    for t in re.findall(r"tensor<([^>]*)>", main):     # one symbol per unknown dimension
        dims = []
        for dim in t.split("x")[:-1]:
            dims.append(f"d{n}" if dim == "?" else "_")
            n += dim == "?"
        specs.append("(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")")
    args = shape_poly.symbolic_args_specs(d["inputs"], specs)
    in_avals, in_tree = tree_util.tree_flatten((tuple(core.ShapedArray(a.shape, a.dtype) for a in args), {}))
    out_avals, out_tree = tree_util.tree_flatten(tuple(core.ShapedArray(np.shape(a), np.asarray(a).dtype)
                                                       for a in d["expected_outputs"]))
    none_in, none_out = (None,) * len(in_avals), (None,) * len(out_avals)
    exp = _export.Exported(
        fun_name="f", in_tree=in_tree, in_avals=tuple(in_avals), out_tree=out_tree, out_avals=tuple(out_avals),
        _has_named_shardings=True, _in_named_shardings=none_in, _out_named_shardings=none_out,
        in_shardings_hlo=none_in, out_shardings_hlo=none_out, platforms=("cpu",), ordered_effects=(),
        unordered_effects=(), disabled_safety_checks=(jax.export.DisabledSafetyCheck.custom_call("any"),),
        mlir_module_serialized=d["mlir_module_serialized"], calling_convention_version=d["xla_call_module_version"],
        nr_devices=d.get("nr_devices", 1), module_kept_var_idx=tuple(range(len(in_avals))),
        uses_global_constants=True, _get_vjp=None)
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    lowered = jax.jit(exp.call).lower(*d["inputs"])
    refined = _jax.mlir.refine_polymorphic_shapes(mlir.module_to_bytecode(lowered.compiler_ir("stablehlo")),
                                                  enable_shape_assertions=True, validate_static_shapes=True)
    return _computation_text(refined)


def _flatten(x):
    if isinstance(x, (tuple, list)):
        out = []
        for v in x:
            out += _flatten(v)
        return out
    return [np.asarray(x)]


def main(argv):
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "tests/data/back_compat"
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    for name, mname, d in cases():
        entry = {"platform": d.get("platform"), "custom_call_targets": list(d.get("custom_call_targets", [])),
                 "serialized_date": str(d.get("serialized_date", "")) if isinstance(
                     d.get("serialized_date"), datetime.date) else str(d.get("serialized_date", "")),
                 "source": f"jax/_src/internal_test_util/export_back_compat_test_data/{mname.replace('.', '/')}.py"}
        main = re.search(r"func\.func public @main\((.*?)\)\s*->", d["mlir_module_text"], re.S)
        poly = ("jax.uses_shape_polymorphism = true" in d["mlir_module_text"]
                or bool(main and re.search(r"tensor<[^>]*\?", main.group(1))))
        try:
            text = refined_hlo_text(d) if poly else to_hlo_text(d["mlir_module_text"])
        except Exception as e:               # noqa: BLE001 - recorded as the case's outcome
            entry["converted"] = False
            entry["reason"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            index[name] = entry
            continue
        entry["shape_polymorphic"] = poly
        devices = int(d.get("nr_devices", 1))
        entry["nr_devices"] = devices
        head, _, rest = text.partition("\n")
        if devices > 1 and "num_partitions=" not in head:     # the converter leaves the module's config out
            text = f"{head}, num_partitions={devices}\n{rest}"
        (out / f"{name}.hlo").write_text(text)
        ins = _flatten(d.get("inputs", ()))
        outs = _flatten(d["expected_outputs"])
        np.savez(out / f"{name}.inputs.npz", **{f"arg{i}": v for i, v in enumerate(ins)})
        np.savez(out / f"{name}.expected.npz", **{f"out{i}": v for i, v in enumerate(outs)})
        entry["converted"] = True
        index[name] = entry
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    ok = sum(e["converted"] for e in index.values())
    print(f"{ok} of {len(index)} cases converted into {out}")
    for n, e in index.items():
        if not e["converted"]:
            print(f"  not converted: {n}: {e['reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
