"""Second stage of parsing: names, opcodes and attributes -> the typed IR, with located errors."""
from __future__ import annotations

from ..errors import Diagnostic, HloSyntaxError
from ..ir import opcodes as ops
from ..ir.attributes import (AttrError, ComputationRef, Group, IntList, KV, Quoted, decoder,
                             generic_text)
from ..ir.literal import Literal, LiteralError, parse_literal
from ..ir.module import (Computation, FileLocation, Instruction, Loc, Module, StackFrame,
                         StackFrames, frozen_map)
from ..ir.shape import Shape

HEADER_ATTRS = {
    "entry_computation_layout": "computation_layout",
    "is_scheduled": "bool",
    "replica_count": "int",
    "num_partitions": "int",
    "input_output_alias": "input_output_alias",
    "buffer_donor": "buffer_donor",
    "alias_passthrough_params": "bool",
    "frontend_attributes": "frontend_attributes",
    "allow_spmd_sharding_propagation_to_parameters": "bool_list",
    "allow_spmd_sharding_propagation_to_output": "bool_list",
    "use_auto_spmd_partitioning": "bool",
    "spmd_output_sharding": "sharding",
    "spmd_parameters_shardings": "raw",
    "launch_id": "int",
    "cross_program_prefetches": "raw",
    "device_assignment": "raw",
    "origin_recovery_table": "raw",
}


class _Errors:
    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.text = text
        self._lines = None
        self.items: list[Diagnostic] = []

    def line(self, n: int) -> str:
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines[n - 1] if 0 < n <= len(self._lines) else ""

    def add(self, tok, message: str, code: str, instruction: str | None = None):
        line = getattr(tok, "line", 0) or 0
        col = getattr(tok, "column", 0) or 0
        self.items.append(Diagnostic(message, self.filename, line, col, "error", code, instruction,
                                     self.line(line) if line else None))

    def raise_if_any(self):
        if self.items:
            self.items.sort(key=lambda d: (d.line, d.column))
            first = self.items[0]
            raise HloSyntaxError(first.message, self.items)


def _loc(filename, tok) -> Loc:
    return Loc(filename, getattr(tok, "line", 0) or 0, getattr(tok, "column", 0) or 0)


def build_module(raw, text: str, filename: str) -> Module:
    errs = _Errors(text, filename)
    # --- header
    name = "module"
    attrs: dict = {}
    has_header = raw.header is not None
    if has_header:
        name_tok, hattrs = raw.header
        name = str(name_tok).lstrip("%")
        for aname, value, tok in hattrs:
            kind = HEADER_ATTRS.get(aname)
            if kind is None:
                errs.add(tok, f"unknown module attribute '{aname}' (known: {', '.join(sorted(HEADER_ATTRS))})",
                         "E020")
                continue
            if aname in attrs:
                errs.add(tok, f"module attribute '{aname}' is given twice", "E021")
                continue
            try:
                attrs[aname] = decoder(kind)(value)
            except AttrError as e:
                errs.add(tok, f"module attribute {aname}: {e}", "E022")
    # --- stack frame sections
    frames = _build_sections(raw.sections, errs)
    # --- computations
    comp_names: dict[str, object] = {}
    for rc in raw.computations:
        if rc.name in comp_names:
            errs.add(rc.name_tok, f"computation '{rc.name}' is defined twice", "E030")
        comp_names[rc.name] = rc
    entries = [rc for rc in raw.computations if rc.is_entry]
    if len(entries) > 1:
        errs.add(entries[1].name_tok, f"more than one ENTRY computation ('{entries[0].name}' and "
                 f"'{entries[1].name}')", "E031")
    if not raw.computations:
        errs.items.append(Diagnostic("the module has no computations", filename, 1, 1, code="E032"))
        errs.raise_if_any()
    entry = entries[0].name if entries else raw.computations[-1].name
    inline: list[Computation] = []
    comps = []
    for rc in raw.computations:
        comps.append(_build_computation(rc, errs, filename, comp_names, inline, text))
    errs.raise_if_any()
    return Module(name, tuple(inline) + tuple(comps), entry, frozen_map(attrs), frames, has_header, filename)


def _build_sections(sections, errs) -> StackFrames:
    files: dict[int, str] = {}
    funcs: dict[int, str] = {}
    locs: dict[int, FileLocation] = {}
    frames: dict[int, StackFrame] = {}
    for sname, entries in sections:
        for ident, value, tok in entries:
            try:
                if sname in ("FileNames", "FunctionNames"):
                    if not isinstance(value, Quoted):
                        raise AttrError(f"expected a quoted name, got '{generic_text(value)}'")
                    (files if sname == "FileNames" else funcs)[ident] = str(value)
                else:
                    fields = _kv_ints(value)
                    if sname == "FileLocations":
                        locs[ident] = FileLocation(fields.get("file_name_id", 0), fields.get("function_name_id", 0),
                                                   fields.get("line", 0), fields.get("end_line", 0),
                                                   fields.get("column", 0), fields.get("end_column", 0))
                    else:
                        frames[ident] = StackFrame(fields.get("file_location_id", 0),
                                                   fields.get("parent_frame_id", 0))
            except AttrError as e:
                errs.add(tok, f"{sname} entry {ident}: {e}", "E025")
    return StackFrames(frozen_map(files), frozen_map(funcs), frozen_map(locs), frozen_map(frames))


def _kv_ints(value) -> dict[str, int]:
    if isinstance(value, IntList) and not value:
        return {}
    if not (isinstance(value, Group) and value.open == "{"):
        raise AttrError(f"expected {{key=value ...}}, got '{generic_text(value)}'")
    out = {}
    for it in value.values():
        if not isinstance(it, KV):
            raise AttrError(f"expected key=value, got '{generic_text(it)}'")
        try:
            out[it.key] = int(str(it.value))
        except ValueError:
            raise AttrError(f"{it.key} must be an integer, got '{generic_text(it.value)}'") from None
    return out


def _build_computation(rc, errs: _Errors, filename: str, comp_names, inline, text) -> Computation:
    instrs: list[Instruction] = []
    names: dict[str, object] = {}
    roots = []
    raw_list = []
    # lift nested operand instructions out, in front of their users
    counter = [0]

    def flatten(ri):
        for a in ri.args:
            if a.kind == "nested":
                counter[0] += 1
                nested = a.nested
                nested.name = f"{nested.opcode}.nested.{counter[0]}"
                while nested.name in names:
                    counter[0] += 1
                    nested.name = f"{nested.opcode}.nested.{counter[0]}"
                flatten(nested)
                a.kind, a.name = "ref", nested.name
                names[nested.name] = nested
        raw_list.append(ri)

    for ri in rc.instrs:
        if ri.name in names:
            errs.add(ri.name_tok, f"instruction name '{ri.name}' is used twice in computation '{rc.name}'",
                     "E040", ri.name)
        names[ri.name] = ri
        if ri.is_root:
            roots.append(ri)
    for ri in rc.instrs:
        flatten(ri)
    if rc.name_tok is not None and getattr(rc, "synthesized", False):
        # a lone instruction: XLA makes a parameter of every operand written with a shape
        pnum = 0
        lifted = []
        for ri in list(raw_list):
            for a in ri.args:
                if a.kind == "ref" and a.name not in names and a.shape is not None:
                    from lark import Token as _Tok
                    p = RawInstrLike(a.name, a.shape, pnum, a.tok)
                    names[a.name] = p
                    lifted.append(p)
                    pnum += 1
        raw_list[:0] = lifted
    if not rc.instrs:
        errs.add(rc.name_tok, f"computation '{rc.name}' has no instructions", "E041")
        return Computation(rc.name, (), "", rc.is_entry, loc=_loc(filename, rc.name_tok))
    if len(roots) > 1:
        errs.add(roots[1].name_tok, f"computation '{rc.name}' has more than one ROOT ('{roots[0].name}' and "
                 f"'{roots[1].name}')", "E042", roots[1].name)
    root = roots[0].name if roots else rc.instrs[-1].name
    params_seen: dict[int, object] = {}
    for ri in raw_list:
        inst = _build_instruction(ri, errs, filename, names, comp_names, params_seen, rc.name, inline, text)
        if inst is not None:
            instrs.append(inst)
    # parameters numbered 0..n-1
    if params_seen:
        n = len(params_seen)
        missing = [k for k in range(n) if k not in params_seen]
        if missing:
            last = max(params_seen)
            errs.add(params_seen[last], f"parameter numbers of computation '{rc.name}' must be 0..{n - 1}; "
                     f"parameter({missing[0]}) is missing", "E043")
    params = None
    if rc.params is not None:
        params = tuple((n, s) for n, s, _ in rc.params)
    thread = rc.thread[1] if rc.thread else None
    return Computation(rc.name, tuple(instrs), root, rc.is_entry, params, rc.result, thread,
                       bool(roots), _loc(filename, rc.name_tok))


_ASYNC_SUFFIX = {"-start": "async-start", "-update": "async-update", "-done": "async-done"}


def _spec_for(opcode: str):
    """The table's row, or for the async sugar `<op>-start/-update/-done` a row merging the
    wrapped op's attributes with those of async-start/update/done."""
    spec = ops.OPCODES.get(opcode)
    if spec is not None:
        return spec
    for suffix, generic in _ASYNC_SUFFIX.items():
        if opcode.endswith(suffix):
            base = ops.OPCODES.get(opcode[: -len(suffix)])
            gspec = ops.OPCODES.get(generic)
            if base is None or gspec is None:
                return None
            attrs = dict(gspec.attrs)
            attrs.pop("calls", None)
            required = frozenset()
            if suffix == "-start":
                attrs.update(base.attrs)
                required = base.required
            return ops.OpSpec(opcode, "async", 0, None, attrs, required)
    return None


def RawInstrLike(name, shape, number, tok):
    from .frontend import Arg, RawInstr, Pos
    pos = Pos(name, getattr(tok, "line", 0), getattr(tok, "column", 0))
    return RawInstr(False, pos, shape, None, Pos("parameter", pos.line, pos.column),
                    [Arg("literal", text=str(number), tok=pos)], [])


def _build_instruction(ri, errs: _Errors, filename, names, comp_names, params_seen, comp_name,
                       inline, text) -> Instruction | None:
    spec = _spec_for(ri.opcode)
    loc = _loc(filename, ri.name_tok if ri.name_tok else ri.opcode_tok)
    if spec is None:
        errs.add(ri.opcode_tok, f"unknown opcode '{ri.opcode}'", "E050", ri.name)
        return None
    literal = None
    pnum = None
    operands: list[str] = []
    operand_shapes: list = []
    if ri.opcode == "parameter":
        if len(ri.args) != 1 or ri.args[0].kind != "literal" or not _is_int(ri.args[0].text):
            errs.add(ri.opcode_tok, "parameter takes its number: parameter(N)", "E051", ri.name)
            return None
        pnum = int(ri.args[0].text)
        if pnum in params_seen:
            errs.add(ri.args[0].tok or ri.opcode_tok, f"parameter number {pnum} is used twice in computation "
                     f"'{comp_name}'", "E052", ri.name)
        params_seen[pnum] = ri.name_tok
    elif ri.opcode == "constant":
        if len(ri.args) != 1:
            errs.add(ri.opcode_tok, "constant takes one literal: constant(value)", "E053", ri.name)
            return None
        a = ri.args[0]
        # `constant(true)`, `constant(nan)`, `constant(inf)` lex like operand names
        txt = a.text if a.kind == "literal" else (str(a.tok) if a.kind == "ref" and a.shape is None else None)
        if txt is None:
            errs.add(a.tok or ri.opcode_tok, f"constant takes a literal value, got an operand '{a.name}'", "E053",
                     ri.name)
            return None
        if ri.shape.element_type in ("token", "opaque"):
            errs.add(ri.opcode_tok, f"a constant cannot have shape {ri.shape}", "E054", ri.name)
            return None
        try:
            literal = parse_literal(txt, ri.shape)
        except LiteralError as e:
            errs.add(a.tok or ri.opcode_tok, f"constant: {e}", "E055", ri.name)
            return None
    else:
        for a in ri.args:
            if a.kind != "ref":
                errs.add(a.tok or ri.opcode_tok, f"{ri.opcode} takes operands, not the literal '{a.text}'", "E056",
                         ri.name)
                continue
            if a.name not in names:
                errs.add(a.tok, f"operand '{a.name}' of '{ri.name}' is not defined in computation '{comp_name}'",
                         "E057", ri.name)
                continue
            operands.append(a.name)
            operand_shapes.append(a.shape)
        n = len(ri.args)
        if n < spec.min_operands or (spec.max_operands is not None and n > spec.max_operands):
            if spec.max_operands == spec.min_operands:
                want = f"{spec.min_operands}"
            elif spec.max_operands is None:
                want = f"at least {spec.min_operands}"
            else:
                want = f"{spec.min_operands} to {spec.max_operands}"
            errs.add(ri.opcode_tok, f"{ri.opcode} takes {want} operand{'s' if want != '1' else ''}, got {n}",
                     "E058", ri.name)
    # attributes
    attrs: dict = {}
    for aname, value, tok in ri.attrs:
        kind = spec.attrs.get(aname) or ops.COMMON_ATTRS.get(aname)
        if kind is None:
            known = sorted(set(spec.attrs) | set(ops.COMMON_ATTRS))
            errs.add(tok, f"{ri.opcode} has no attribute '{aname}' (it takes: {', '.join(known)})", "E060",
                     ri.name)
            continue
        if aname in attrs:
            errs.add(tok, f"attribute '{aname}' is given twice", "E061", ri.name)
            continue
        if kind == "computation" and isinstance(value, Group) and value.open == "{":
            value = _inline_computation(value, tok, ri, aname, errs, filename, comp_names, inline, text)
            if value is None:
                continue
        elif kind == "computations" and isinstance(value, Group) and value.open == "{":
            items = []
            for k, it in enumerate(value.items):
                if isinstance(it, Group) and it.open == "{":
                    it = _inline_computation(it, tok, ri, f"{aname}.{k}", errs, filename, comp_names, inline, text)
                    if it is None:
                        break
                items.append(it)
            else:
                value = Group("{", tuple(items), value.text)
        try:
            decoded = decoder(kind)(value)
        except AttrError as e:
            errs.add(tok, f"{ri.opcode} attribute {aname}: {e}", "E062", ri.name)
            continue
        attrs[aname] = decoded
        _check_refs(decoded, tok, aname, errs, comp_names, names, ri)
    for req in spec.required:
        if req not in attrs and not any(a == req for a, _, _ in ri.attrs):
            errs.add(ri.opcode_tok, f"{ri.opcode} requires the attribute '{req}'", "E063", ri.name)
    has_shapes = any(s is not None for s in operand_shapes)
    return Instruction(ri.name, ri.opcode, ri.shape, tuple(operands), frozen_map(attrs), literal, pnum, loc,
                       tuple(operand_shapes) if has_shapes else None)


def _check_refs(decoded, tok, aname, errs, comp_names, names, ri):
    refs = []
    if isinstance(decoded, ComputationRef):
        refs = [decoded]
    elif isinstance(decoded, tuple) and decoded and isinstance(decoded[0], ComputationRef):
        refs = list(decoded)
    for r in refs:
        if r.name not in comp_names:
            errs.add(tok, f"{aname} names computation '{r.name}', which is not defined", "E064", ri.name)
    if aname == "control-predecessors":
        for n in decoded:
            if n not in names:
                errs.add(tok, f"control predecessor '{n}' is not defined in this computation", "E065", ri.name)


def _inline_computation(group, tok, ri, aname, errs, filename, comp_names, inline, text):
    from .frontend import parse_raw
    from .frontend import RawComputation
    from lark import Token
    body = group.text
    try:
        instrs = parse_raw(body, filename, start_line=(tok.line or 1) - 1)
    except HloSyntaxError as e:
        errs.items.extend(e.diagnostics)
        return None
    cname = f"{ri.name}.{aname}"
    name_tok = Token("NAME", cname, line=tok.line, column=tok.column)
    rc = RawComputation(False, name_tok, None, None, instrs, None)
    comp_names[cname] = rc
    inline.append(_build_computation(rc, errs, filename, comp_names, inline, text))
    from ..ir.attributes import InlineComputation
    return InlineComputation(cname)


def _is_int(s) -> bool:
    try:
        int(s)
        return True
    except (TypeError, ValueError):
        return False
