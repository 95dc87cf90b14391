"""Goldens for the linalg programs whose opcode XLA CPU cannot run itself.

* ragged-dot*.hlo: XLA CPU has no ragged-dot ("not supported by XLA:CPU ThunkEmitter"); the golden
  is jax.lax.ragged_dot_general with the same dimension numbers, which JAX lowers to masks and dots
  that XLA runs.
* scaled-dot*.hlo: XLA CPU cannot run scaled-dot (its HLO-to-StableHLO bridge has no such op);
  the golden is XLA CPU running NAME.equivalent.hlo.txt, written here: each scaled-dot replaced by
  the ordinary ops XLA's ScaledDotRewriter (xla/backends/gpu/transforms/scaled_dot_rewriter.cc)
  turns it into.  Where jax.lax.scaled_dot can express the program (one scaled-dot of f8/f4
  operands with f8e8m0fnu scales blocked along the contracting dimension only), XLA running JAX's
  own decomposition of it must give the same bits, which checks the one written here.

Inputs come from the programs' .inputs.py files, as for scripts/make_goldens.py.

    python tests/programs/linalg/make_special_goldens.py [NAME ...]
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))


def _inputs(name):
    return runpy.run_path(str(HERE / f"{name}.inputs.py"))["inputs"]()


def _save(name, args, outs):
    sys.path.insert(0, str(HERE.parents[2] / "scripts"))
    from make_goldens import _storable            # ml_dtypes arrays are stored as raw bytes
    payload = {f"arg{k}": _storable(a) for k, a in enumerate(args)}
    payload.update({f"out{k}": _storable(o) for k, o in enumerate(outs)})
    np.savez(HERE / f"{name}.npz", **payload)
    print(f"wrote {name}.npz")


def ragged(name):
    import jax
    from jax import lax
    from hlo_cli.parser import parse
    inst = parse((HERE / f"{name}.hlo").read_text()).entry_computation.root_instruction
    a = inst.attrs
    dn = lax.RaggedDotDimensionNumbers(
        ((list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))),
         (list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ())))),
        list(a["lhs_ragged_dims"]), list(a.get("rhs_group_dims", ())))
    args = _inputs(name)
    out = jax.jit(lambda x, y, g: lax.ragged_dot_general(x, y, g, dn))(*args)
    _save(name, args, [np.asarray(out)])


def _target_type(a: str, b: str) -> str:
    """XLA's GetTargetType in the ScaledDotRewriter: bf16 when both are narrower than 16 bits, the
    type when both agree, f32 for two types of one width, else the wider one."""
    from hlo_cli.ir.dtypes import ELEMENT_TYPES
    wa, wb = ELEMENT_TYPES[a].bits, ELEMENT_TYPES[b].bits
    if wa < 16 and wb < 16:
        return "bf16"
    if a == b:
        return a
    if wa == wb:
        return "f32"
    return a if wa > wb else b


def _decompose(inst, shapes, line: str, root: bool) -> list[str]:
    """The ScaledDotRewriter's replacement of one scaled-dot instruction, as HLO lines."""
    out, n = [], inst.name
    arr = lambda t, dims: f"{t}[{','.join(map(str, dims))}]"      # noqa: E731

    def convert(name, t, dims, tag):
        if shapes[name][0] == t:
            return name
        out.append(f"  {n}.{tag} = {arr(t, dims)} convert({name})")
        return f"{n}.{tag}"

    def dequantize(x, scale, side):
        xt, xd = shapes[x]
        st, sd = shapes[scale]
        if not sd:                                   # a scalar scale: the operand as it is
            return x, xt
        t = _target_type(xt, st)
        xc, sc = convert(x, t, xd, f"{side}"), convert(scale, t, sd, f"{side}_scale")
        if len(sd) != len(xd):                       # a no-op scale of another rank: its one value
            out.append(f"  {n}.{side}_one = {arr(t, [1] * len(xd))} reshape({sc})")
            sc, sd = f"{n}.{side}_one", [1] * len(xd)
        dims, bdims = [], []
        for a, b in zip(xd, sd):
            bdims.append(len(dims))
            dims.append(b)
            if a != b:
                dims.append(a // b)
        out.append(f"  {n}.{side}_bcast = {arr(t, dims)} broadcast({sc}), dimensions={{{','.join(map(str, bdims))}}}")
        out.append(f"  {n}.{side}_blocks = {arr(t, xd)} reshape({n}.{side}_bcast)")
        out.append(f"  {n}.{side}_scaled = {arr(t, xd)} multiply({xc}, {n}.{side}_blocks)")
        return f"{n}.{side}_scaled", t

    lhs, rhs, ls, rs = inst.operands
    l, lt = dequantize(lhs, ls, "lhs")
    r, rt = dequantize(rhs, rs, "rhs")
    shapes[l], shapes[r] = (lt, shapes[lhs][1]), (rt, shapes[rhs][1])
    t = _target_type(lt, rt)
    l, r = convert(l, t, shapes[lhs][1], "lhs_common"), convert(r, t, shapes[rhs][1], "rhs_common")
    res_t, res_d = inst.shape.element_type, list(inst.shape.dims)
    dot_t = _target_type(t, res_t)
    attrs = line[line.index(")", line.index("scaled-dot(")) + 1:]
    out.append(f"  {n}.dot = {arr(dot_t, res_d)} dot({l}, {r}){attrs}")
    if dot_t == res_t:
        out[-1] = out[-1].replace(f"  {n}.dot =", f"  {n} =", 1)
    else:
        out.append(f"  {n} = {arr(res_t, res_d)} convert({n}.dot)")
    if root:
        out[-1] = out[-1].replace("  ", "  ROOT ", 1)
    return out


def equivalent(text: str) -> str:
    """`text` with every scaled-dot of its entry computation replaced by the rewriter's ops."""
    from hlo_cli.parser import parse
    comp = parse(text).entry_computation
    shapes = {i.name: (i.shape.element_type, list(i.shape.dims)) for i in comp.instructions
              if not i.shape.is_tuple}
    by_line = {i.loc.line: i for i in comp.instructions if i.opcode == "scaled-dot"}
    lines = []
    for k, line in enumerate(text.splitlines(), 1):
        inst = by_line.get(k)
        lines += _decompose(inst, shapes, line, inst.name == comp.root) if inst else [line]
    return "\n".join(lines) + "\n"


def _jax_check(name, text, args, outs):
    """XLA running jax.lax.scaled_dot's own decomposition must agree bit for bit, where JAX can say
    it: one scaled-dot as the root, all four operands of one rank, f8/f4 operands, f8e8m0fnu scales
    blocked along the contracting dimension only."""
    import jax
    from jax import lax
    from hlo_cli.parser import parse
    comp = parse(text).entry_computation
    inst = comp.by_name[comp.root]
    params = [i.name for i in comp.instructions if i.opcode == "parameter"]
    shapes = [comp.by_name[o].shape for o in inst.operands]
    if inst.opcode != "scaled-dot" or params != list(inst.operands) or len({s.rank for s in shapes}) != 1 \
            or any(s.element_type != "f8e8m0fnu" for s in shapes[2:]) \
            or any(comp.by_name[o].shape.element_type[:2] not in ("f8", "f4") for o in inst.operands[:2]):
        return
    a = inst.attrs
    for x, s, dims in ((shapes[0], shapes[2], a.get("lhs_contracting_dims", ())),
                       (shapes[1], shapes[3], a.get("rhs_contracting_dims", ()))):
        if any(x.dims[d] != s.dims[d] for d in range(x.rank) if d not in dims):
            return
    dn = ((tuple(a.get("lhs_contracting_dims", ())), tuple(a.get("rhs_contracting_dims", ()))),
          (tuple(a.get("lhs_batch_dims", ())), tuple(a.get("rhs_batch_dims", ()))))
    want = jax.jit(lambda x, y, sx, sy: lax.scaled_dot(x, y, lhs_scale=sx, rhs_scale=sy, dimension_numbers=dn,
                                                        preferred_element_type=outs[0].dtype))(*args)
    want = np.asarray(want)
    same = (want.view(np.uint8) == outs[0].view(np.uint8)).all()
    assert same, f"{name}: XLA running jax.lax.scaled_dot differs from the rewriter's decomposition"
    print(f"  {name}: jax.lax.scaled_dot agrees bit for bit")


def scaled(name):
    from hlo_cli.tools.xla_reference import run_with_xla
    text = (HERE / f"{name}.hlo").read_text()
    eq = equivalent(text)
    header = (f"// {name}.hlo with each scaled-dot replaced by the ops XLA's ScaledDotRewriter makes of it\n"
              "// (written and run by make_special_goldens.py to make the golden: XLA CPU cannot run scaled-dot).\n")
    body = eq.split("\n")
    while body and body[0].startswith("//"):          # the program's own comments describe the program
        body.pop(0)
    (HERE / f"{name}.equivalent.hlo.txt").write_text(header + "\n".join(body))
    args = _inputs(name)
    outs = run_with_xla(eq, args)
    _save(name, args, outs)
    _jax_check(name, text, args, outs)


if __name__ == "__main__":
    names = sys.argv[1:] or ["ragged-dot", "ragged-dot.batched", "ragged-dot.contracting",
                             *sorted(p.stem for p in HERE.glob("scaled-dot*.hlo"))]
    for n in names:
        (scaled if n.startswith("scaled-dot") else ragged)(n)
