"""Second stage of parsing: names, opcodes and attributes -> the typed IR, with located errors."""
from __future__ import annotations

from ..errors import Diagnostic, HloSyntaxError
from ..ir import opcodes as ops
from ..ir.attributes import (AttrError, ComputationRef, Group, IntList, KV, Quoted, Seq, decoder,
                             generic_text)
from ..ir.literal import DeferredLiteral, Literal, LiteralError, deferred_literal, parse_literal
from ..ir.module import (Computation, FileLocation, Instruction, Loc, Module, StackFrame, make_instruction,
                         StackFrames, frozen_map)
from ..ir.attributes import BackendConfig, Metadata
from ..ir.shape import MAX_SHAPE_DEPTH, Shape, parse_array_shape, shape_depth
from .frontend import (LineInstr, Pos, ATTR_SPLIT, NAME_SPLIT, ShapeTokenError, SubParseError, TemplateBody,
                       decode_value, line_instr)
import re
import sys
from itertools import islice
from operator import itemgetter

from ..ir.attributes import needle_of, nth_among, value_tokens
from ..ir.dtypes import ELEMENT_TYPES
from ..ir.printer import KEYWORDS, RESERVED_NAMES

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
        self.templates: dict = {}       # frontend.BodyTemplate -> what its own body built (_record_template)

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


def build_module(raw, text: str, filename: str, known_computations=()) -> Module:
    """Build the IR.  `known_computations` names computations defined elsewhere (the other part of
    a module parsed in pieces), which called-computation references may name.

    Like XLA, names must be defined before they are used: an operand, a control predecessor or a
    called computation must appear earlier in the text (`known_computations` count as earlier)."""
    errs = _Errors(text, filename)
    src = _source(errs, text)
    piece = bool(known_computations)      # a later part of a module parsed in pieces
    # --- header
    name = "module"
    attrs: dict = {}
    has_header = raw.header is not None
    if has_header:
        name_tok, hattrs = raw.header
        name = str(name_tok).lstrip("%")
        problem = _name_problem(str(name_tok), "a module name after HloModule", instruction=False)
        if problem is not None and getattr(name_tok, "line", 0):
            msg, off = problem
            errs.add(_shifted(name_tok, off), msg, "E023")
        for aname, value, tok in hattrs:
            _check_attr_glued(tok, aname, errs, src, None)
            kind = HEADER_ATTRS.get(aname)
            if kind is None or aname not in _XLA_HEADER_ATTRS:
                errs.add(tok, f"unexpected module attribute '{aname}' (allowed: "
                         f"{', '.join(sorted(_XLA_HEADER_ATTRS))})", "E020")
                continue
            if aname in attrs:
                errs.add(tok, f"module attribute '{aname}' is given twice", "E021")
                continue
            try:
                attrs[aname] = decoder(kind)(value)
            except AttrError as e:
                errs.add(_attr_error_pos(src, tok, aname, e), f"module attribute {aname}: {e}", "E022")
    # --- stack frame sections
    if raw.sections and not has_header and not piece:
        at = _section_positions(src, raw)[0]
        errs.add(at, f"expects HloModule before the {raw.sections[0][0]} section: stack-frame sections "
                 "follow the module header", "E026")
    frames = _build_sections(raw.sections, errs, src, raw)
    # --- computations
    if not raw.computations:
        at = src.eof()
        if has_header:
            msg = "expects a computation after the module header, got end of file"
        elif text.strip():
            msg = "expects HloModule, ENTRY or a computation, got end of file (the input has only comments)"
        else:
            msg = "expects HloModule, ENTRY or a computation, got end of file (the input is empty)"
        errs.items.append(Diagnostic(msg, filename, at.line, at.column, code="E032",
                                     source_line=errs.line(at.line)))
        errs.raise_if_any()
    first = raw.computations[0]
    if not has_header and not piece and not first.is_entry and first.params is not None:
        # XLA reads such a text as a single instruction `name (`... and wants '=' after the name
        at = src.find_after(first.name_tok, "(") or first.name_tok
        errs.add(at, f"expects HloModule or ENTRY before a computation with a signature: without them the "
                 f"text is read as a single instruction, and '{first.name_tok}' would need '=' after it", "E033")
    comp_names: dict[str, object] = {}
    for rc in raw.computations:
        problem = _name_problem(str(rc.name_tok), "a computation name", instruction=False)
        if problem is not None:
            msg, off = problem
            errs.add(_shifted(rc.name_tok, off), msg, "E034")
        if rc.name in comp_names:
            errs.add(rc.name_tok, f"computation '{rc.name}' is defined twice", "E030")
        comp_names[rc.name] = rc
    entries = [rc for rc in raw.computations if rc.is_entry]
    if len(entries) > 1:
        errs.add(src.keyword_before(entries[1].name_tok, "ENTRY"), f"expects only one ENTRY computation: "
                 f"'{entries[1].name}' is marked ENTRY, and so is '{entries[0].name}'", "E031")
    entry = entries[0].name if entries else raw.computations[-1].name
    if not has_header and name == "module":
        name = f"module_{entry}"          # XLA's name for a module without a header
    if raw.computations and getattr(raw.computations[0], "synthesized", False):
        attrs.setdefault("is_scheduled", True)   # XLA schedules the module it makes of a lone instruction
    # computations callable so far: those of the other pieces, then each one once it is built
    defined = _DefinedComputations(comp_names)
    for other in known_computations:
        defined[other] = None
    inline: list[Computation] = []
    comps = []
    for rc in raw.computations:
        comps.append(_build_computation(rc, errs, filename, defined, inline, text))
        defined[rc.name] = rc
    _check_async_callers(comps, errs)
    errs.raise_if_any()
    all_comps = tuple(inline) + tuple(comps)
    if any(i.shape is None for c in all_comps for i in c.instructions):
        all_comps = _infer_missing_shapes(all_comps, errs, attrs)
        errs.raise_if_any()
    return Module(name, all_comps, entry, frozen_map(attrs), frames, has_header, filename)


def _xla_inferred_layout(inst, operands, shape):
    """XLA's inferred transpose keeps the operand's physical layout (a transpose is then a bitcast):
    the result's minor_to_major is the operand's, renumbered through the permutation."""
    if inst.opcode == "tuple":
        return Shape.tuple_of(operands)           # the operands' shapes, layouts included
    if inst.opcode == "get-tuple-element" and operands and operands[0].is_tuple:
        return operands[0].tuple_shapes[inst.attrs["index"]]
    if inst.opcode == "transpose" and operands and operands[0].layout is not None and not shape.is_tuple:
        perm = inst.attrs.get("dimensions", ())
        inv = {p: k for k, p in enumerate(perm)}
        if len(inv) == len(operands[0].layout.minor_to_major):
            from ..ir.shape import Layout
            return replace_shape_layout(shape, Layout(tuple(inv[d] for d in operands[0].layout.minor_to_major)))
    return shape


def replace_shape_layout(shape, layout):
    from dataclasses import replace
    return replace(shape, layout=layout)


def _infer_missing_shapes(comps, errs: _Errors, header: dict):
    """XLA lets some instructions leave out their result shape (`ROOT s = add(a, b)`) and infers it;
    so do we, with the shape rules, in definition order."""
    from dataclasses import replace

    from ..shapes import RuleContext, ShapeRuleError, infer_shape
    done: dict[str, tuple] = {}
    out = []
    for comp in comps:
        shapes: dict[str, Shape] = {}
        new_insts = []
        for inst in comp.instructions:
            if inst.shape is None:
                operands = [shapes.get(o) for o in inst.operands]
                ctx = RuleContext(inst.opcode, None, done, header.get("replica_count", 1),
                                  header.get("num_partitions", 1))
                try:
                    if any(o is None for o in operands):
                        raise ShapeRuleError("an operand's shape is unknown")
                    inferred = infer_shape(inst.opcode, operands, inst.attrs, ctx)
                except (ShapeRuleError, KeyError, AttributeError, TypeError, IndexError) as e:
                    src = errs.line(inst.loc.line)
                    m = re.compile(r"=\s*(" + re.escape(inst.opcode) + r")\s*\(").search(src, inst.loc.column - 1)
                    must_write = "must be written" in str(e)
                    col = inst.loc.column
                    if m:    # XLA points at the '(' when the opcode never infers, else at the opcode
                        col = (m.end() if must_write else m.start(1) + 1)
                    what = (f"cannot infer shape for opcode {inst.opcode}: its result shape must be written"
                            if must_write else f"failed to infer shape for opcode {inst.opcode}: {e}")
                    errs.items.append(Diagnostic(
                        f"{what} (%{inst.name} = <shape> {inst.opcode}(...))", inst.loc.file, inst.loc.line,
                        col, "error", "E070", inst.name, src))
                    shapes[inst.name] = None
                    new_insts.append(inst)
                    continue
                inferred = _xla_inferred_layout(inst, operands, inferred)
                inst = replace(inst, shape=inferred)
            shapes[inst.name] = inst.shape
            new_insts.append(inst)
        comp = replace(comp, instructions=tuple(new_insts))
        root = comp.by_name.get(comp.root)
        done[comp.name] = ([p.shape for p in comp.parameters], root.shape if root is not None else None)
        out.append(comp)
    return tuple(out)


# The module attributes XLA's parser accepts (the others in HEADER_ATTRS are printed by older
# versions of XLA, and rejected by the current parser).
_XLA_HEADER_ATTRS = frozenset({
    "alias_passthrough_params", "allow_spmd_sharding_propagation_to_output",
    "allow_spmd_sharding_propagation_to_parameters", "buffer_donor", "entry_computation_layout",
    "frontend_attributes", "input_output_alias", "is_scheduled", "num_partitions", "origin_recovery_table",
    "replica_count"})


class _DefinedComputations(dict):
    """The computations defined so far (name -> raw computation), which may be called; `everywhere`
    holds all the module's computations, to tell a forward reference from an unknown name."""

    def __init__(self, everywhere):
        super().__init__()
        self.everywhere = everywhere


_SECTION_ORDER = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_SECTION_FIELDS = {
    "FileLocations": ("file_name_id", "function_name_id", "line", "end_line", "column", "end_column"),
    "StackFrames": ("file_location_id", "parent_frame_id"),
}


def _build_sections(sections, errs, src=None, raw=None) -> StackFrames:
    """The stack-frame index.  XLA wants all four sections, in the order FileNames, FunctionNames,
    FileLocations, StackFrames; names are strings, and every field of a FileLocations or
    StackFrames entry is given, as an integer."""
    files: dict[int, str] = {}
    funcs: dict[int, str] = {}
    locs: dict[int, FileLocation] = {}
    frames: dict[int, StackFrame] = {}
    if sections and src is not None:
        positions = _section_positions(src, raw)
        for k, expected in enumerate(_SECTION_ORDER):
            if k >= len(sections):
                after = _after_sections(src, raw)
                errs.add(after, f"expects the '{expected}' section after '{sections[-1][0]}' (a stack-frame "
                         f"index has the sections {', '.join(_SECTION_ORDER)}, in this order)", "E024")
                break
            if sections[k][0] != expected:
                errs.add(positions[k], f"expects the '{expected}' section, got '{sections[k][0]}' (a stack-frame "
                         f"index has the sections {', '.join(_SECTION_ORDER)}, in this order)", "E024")
                break
        else:
            if len(sections) > len(_SECTION_ORDER):
                errs.add(positions[len(_SECTION_ORDER)], f"unexpected second '{sections[4][0]}' section",
                         "E024")
    for sname, entries in sections:
        for ident, value, tok in entries:
            try:
                if sname in ("FileNames", "FunctionNames"):
                    if not isinstance(value, Quoted):
                        raise AttrError(f"expects a quoted string, got '{generic_text(value)}'")
                    (files if sname == "FileNames" else funcs)[ident] = str(value)
                else:
                    fields = _section_fields(sname, value)
                    if sname == "FileLocations":
                        locs[ident] = FileLocation(fields["file_name_id"], fields["function_name_id"],
                                                   fields["line"], fields["end_line"],
                                                   fields["column"], fields["end_column"])
                    else:
                        frames[ident] = StackFrame(fields["file_location_id"], fields["parent_frame_id"])
            except AttrError as e:
                at = tok
                if src is not None:
                    start = src.skip(src.offset(tok) + len(str(tok)))
                    at = src.at(_locate(src, start, e) if e.at is not None else start)
                errs.add(at, f"{sname} entry {ident}: {e}", "E025")
    return StackFrames(frozen_map(files), frozen_map(funcs), frozen_map(locs), frozen_map(frames))


def _section_fields(sname, value) -> dict[str, int]:
    wanted = _SECTION_FIELDS[sname]
    if isinstance(value, IntList) and not value:
        items = []
    elif isinstance(value, Group) and value.open == "{":
        items = value.values()
    else:
        raise AttrError(f"expects {{{wanted[0]}=N ...}}, got '{generic_text(value)}'")
    out = {}
    for it in items:
        if not isinstance(it, KV):
            raise AttrError(f"expects key=value, got '{generic_text(it)}'", at=it, nth=nth_among(items, it))
        if it.key not in wanted:
            raise AttrError(f"unexpected attribute '{it.key}' (expected {', '.join(wanted)})", at=it,
                            nth=nth_among(items, it))
        try:
            out[it.key] = int(str(it.value))
        except ValueError:
            raise AttrError(f"{it.key} must be an integer, got '{generic_text(it.value)}'", at=it,
                            nth=nth_among(items, it)) from None
    missing = [w for w in wanted if w not in out]
    if missing:
        raise AttrError(f"sub-attribute {missing[0]} is expected but not seen (an entry gives "
                        f"{', '.join(wanted)})")
    return out


def _section_positions(src, raw) -> list:
    """Where each section keyword is (they are not kept by the front end)."""
    import re
    out = []
    cursor = 0
    if raw.header is not None and getattr(raw.header[0], "line", 0):
        cursor = src.offset(raw.header[0])
    for sname, entries in raw.sections:
        m = re.compile(r"(?m)^[ \t]*(" + sname + r")\b").search(src.text, cursor)
        if m is None:
            m = re.compile(r"\b(" + sname + r")\b").search(src.text, cursor)
        off = m.start(1) if m else cursor
        out.append(src.at(off))
        cursor = off + len(sname)
        if entries:
            cursor = max(cursor, src.offset(entries[-1][2]) + 1)
    return out


def _after_sections(src, raw):
    """The position of what follows the stack-frame sections: the first computation, or the end."""
    if raw.computations:
        rc = raw.computations[0]
        return src.keyword_before(rc.name_tok, "ENTRY") if rc.is_entry else rc.name_tok
    return src.eof()


def _build_computation(rc, errs: _Errors, filename: str, comp_names, inline, text) -> Computation:
    if rc.fast is not None:
        comp = _build_fused(rc, errs, filename, comp_names, inline, text)
        if comp is not None:
            return comp     # (else the general path, on the records the scanner makes of the same lines)
    src = _source(errs, text)
    instrs: list[Instruction] = []
    names: dict[str, object] = {}
    roots = []
    raw_list = []
    # lift nested operand instructions out, in front of their users

    def flatten(ri):
        if isinstance(ri, LineInstr):
            raw_list.append(ri)
            return
        for a in ri.args:
            if a.kind == "nested":
                nested = a.nested
                # XLA's names: <opcode>.anon, then <opcode>.anon.1, .2, ... when taken
                nested.name = f"{nested.opcode}.anon"
                k = 0
                while nested.name in names:
                    k += 1
                    nested.name = f"{nested.opcode}.anon.{k}"
                flatten(nested)
                a.kind, a.name = "ref", nested.name
                names[nested.name] = nested
        raw_list.append(ri)

    for ri in rc.instrs:
        _check_instruction_name(ri, errs, src)
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
        for k, ri in enumerate(raw_list):
            if isinstance(ri, LineInstr):      # a whole-line token: its operands are needed here
                try:
                    raw_list[k] = ri = ri.to_raw()
                except (ShapeTokenError, SubParseError):
                    continue                   # reported where the instruction is built
            for a in ri.args:
                if a.kind == "ref" and a.name not in names and a.shape is not None:
                    if not a.name:           # XLA's name for an unnamed operand: _<parameter number>
                        a.name = f"_{pnum}"
                        a.tok = a.tok or Pos(a.name, ri.opcode_tok.line, ri.opcode_tok.column)
                    p = RawInstrLike(a.name, a.shape, pnum, a.tok)
                    names[a.name] = p
                    lifted.append(p)
                    pnum += 1
        raw_list[:0] = lifted
    if not rc.instrs:
        at = src.empty_body_end(rc.name_tok) or rc.name_tok
        errs.add(at, f"expects an instruction name, got '}}': computation '{rc.name}' has no instructions "
                 "(a computation needs at least one)", "E041")
        return Computation(rc.name, (), "", rc.is_entry, loc=_loc(filename, rc.name_tok))
    if len(roots) > 1:
        errs.add(_root_keyword(roots[1], src), f"one computation should have only one ROOT: computation "
                 f"'{rc.name}' marks both '{roots[0].name}' and '{roots[1].name}' as ROOT", "E042", roots[1].name)
    root = roots[0].name if roots else rc.instrs[-1].name
    params_seen: dict[int, object] = {}
    defined: dict[str, object] = {}     # instructions defined so far (XLA: define before use)
    scope = _Scope(names, defined, instrs, rc.name, filename)
    for ri in raw_list:
        if isinstance(ri, LineInstr):
            inst = _fast_instruction(ri, filename, defined, comp_names, params_seen)
            if inst is not None:
                if inst.opcode in _CHECKED_OPCODES or not _RESERVED.isdisjoint(inst.operands) or \
                        inst.shape.tuple_shapes is not None:
                    _check_fast(inst, ri, errs, src)
                instrs.append(inst)
                defined[inst.name] = inst
                continue
            try:
                ri = ri.to_raw()
            except ShapeTokenError as e:
                errs.add(_shifted(e.tok, getattr(e.err, "offset", 0)), f"bad shape: {e.err}", "E002", ri.name)
                defined[ri.name] = None
                continue
            except SubParseError as e:
                errs.add(_At(e.line, e.column), e.message, "E003", ri.name)
                defined[ri.name] = None
                continue
        _lift_tuple_access(ri, scope, errs)
        inst = _build_instruction(ri, errs, filename, defined, comp_names, params_seen, rc.name, inline, text,
                                  scope)
        if inst is not None:
            instrs.append(inst)
        defined[ri.name] = inst
    # parameters numbered 0..n-1
    if params_seen:
        n = len(params_seen)
        missing = [k for k in range(n) if k not in params_seen]
        if missing:
            last = max(params_seen)
            errs.add(params_seen[last], f"parameter numbers of computation '{rc.name}' must be 0..{n - 1}; "
                     f"parameter({missing[0]}) is missing", "E043")
    return _computation(rc, instrs, root, bool(roots), errs, filename)


def _computation(rc, instrs, root, root_explicit, errs, filename) -> Computation:
    params = None
    if rc.params is not None:
        params = tuple((n, s) for n, s, _ in rc.params)
    for s in [s for _, s in params or ()] + [rc.result]:
        if _too_deep(s, rc.name_tok, errs, None):
            break
    thread = rc.thread[1] if rc.thread else None
    return Computation(rc.name, tuple(instrs), root, rc.is_entry, params, rc.result, thread,
                       root_explicit, _loc(filename, rc.name_tok))


def _build_fused(rc, errs: _Errors, filename: str, comp_names, inline, text) -> Computation | None:
    """A body read in one pass (frontend.FastBody) built straight from its lines: what
    _build_computation makes of the same lines when every instruction builds without a finding.
    None, with nothing reported or defined, at anything else (a name to check, a second ROOT, an
    instruction with an error, a gap in the parameter numbers): the general path then redoes it."""
    body = rc.fast
    if type(body) is TemplateBody:
        comp = _build_templated(rc, body, errs, filename, comp_names)
        if comp is not None:
            return comp
        body = body.lines_body()
    reported = len(errs.items)
    everywhere = getattr(comp_names, "everywhere", comp_names)
    state = (len(inline), len(comp_names), len(everywhere))     # what a general line may add to
    defined: dict[str, Instruction] = {}
    instrs: list[Instruction] = []
    params_seen: dict[int, object] = {}
    root = None
    reserved, checked, match_type = _RESERVED, _CHECKED_OPCODES, re.Match
    for m, attr_text, line, ls in zip(body.matches, body.attrs, body.lines, body.starts):
        if type(m) is not match_type:       # a line in the general form
            _source(errs, text).known[line] = ls       # (where its name is, without counting the lines above)
            inst = _fused_general(m, rc, errs, filename, defined, comp_names, params_seen, inline, text, instrs)
            if inst is None or (m.is_root and root is not None):
                break
            if m.is_root:
                root = m.name
            instrs.append(inst)
            defined[m.name] = inst
            continue
        is_root, spelled, shape_text, opcode, ops_text = m.group(2, 3, 4, 5, 6)
        name = spelled[1:] if spelled[0] == "%" else spelled
        if name in defined or name in reserved or not name.isascii() or text[m.end(3)] == "=":
            break
        if is_root is not None:
            if root is not None:
                break
            root = name
        inst = instruction_of_parts(name, opcode, shape_text, ops_text, attr_text, line, m.start(3) - ls + 1,
                                    filename, defined, comp_names, params_seen, None)
        if inst is None:
            break
        if not reserved.isdisjoint(inst.operands):
            _check_fast(inst, line_instr(m, line, ls), errs, _source(errs, text))
        elif opcode in checked or inst.shape.tuple_shapes is not None:       # (what _check_fast checks then)
            _check_structure(opcode, inst.shape, len(inst.operands), _At(line, m.start(4) - ls + 1),
                             _At(line, m.start(6) - ls), errs, name)
        instrs.append(inst)
        defined[name] = inst
    else:
        if len(params_seen) == 0 or max(params_seen) == len(params_seen) - 1:
            root_name = root if root is not None else instrs[-1].name
            if body.template is not None and len(errs.items) == reported and len(inline) == state[0]:
                _record_template(body, instrs, root_name, root is not None, errs)
            return _computation(rc, instrs, root_name, root is not None, errs, filename)
    del errs.items[reported:]
    del inline[state[0]:]
    for names, n in ((comp_names, state[1]), (everywhere, state[2])):
        for extra in list(names)[n:]:
            del names[extra]
    return None


def _record_template(body, instrs, root, root_explicit, errs):
    """Keep what the body a template was made of built to (every line an Instruction, no finding), for
    the bodies read by the template (`_build_templated`): per line the instruction's parts, and for a
    line whose attributes hold %-names other than its operands' (called computations, control
    predecessors) its texts cut at those names, to read again where another body's names differ."""
    template = body.template
    index = {inst.name: k for k, inst in enumerate(instrs)}
    on_line: dict = {}
    for j, k in enumerate(template.fixed_lines):
        on_line.setdefault(k, []).append(j)
    rows, again = [], {}
    match_type = re.Match
    for k, (inst, m, attr_text) in enumerate(zip(instrs, body.matches, body.attrs)):
        if type(m) is not match_type:       # a constant in the general form (frontend.body_template)
            if len(m.args) != 1 or m.args[0].kind != "literal" or k in on_line:
                return
            rows.append((inst.opcode, inst.shape, None, dict(inst.attrs), _literal_row(inst, m.args[0].text), None,
                         inst.loc.column, inst.operand_shapes))
            continue
        decoded = {}
        operands = tuple([index[o] for o in inst.operands])
        if attr_text:
            hit = _ATTR_TEXTS.get((inst.opcode, attr_text))
            if not hit:
                return
            decoded = hit[0]
            if k in on_line or hit[2]:
                ops = NAME_SPLIT.split(m.group(6))
                attr = NAME_SPLIT.split(attr_text)
                if attr[1::2] != [template.names[j] for j in on_line.get(k, ())] or \
                        ops[1::2] != list(inst.operands):
                    return
                again[k] = (m.group(4), ops[::2], attr[::2], tuple(on_line.get(k, ())), bool(hit[2]))
        elif k in on_line:
            return
        rows.append((inst.opcode, inst.shape, _getter(operands), decoded,
                     _literal_row(inst, m.group(6)) if inst.opcode == "constant" else None, inst.parameter_number,
                     inst.loc.column, None))
    errs.templates[template] = (tuple(rows), again, index[root], root_explicit)


def _literal_row(inst, text):
    """(a constant's literal text, whether its literal is a DeferredLiteral: deferred_literal decides
    that from the text and the shape alone, so another body's equal constant gets one at once)."""
    return text, type(inst.literal) is DeferredLiteral


def _getter(operands: tuple):
    """A function of the names a body defines giving the operands named by their numbers (None: none)."""
    if not operands:
        return None
    if len(operands) == 1:
        return lambda names, k=operands[0]: (names[k],)
    return itemgetter(*operands)


def _weave(pieces, names) -> str:
    """pieces[0] %names[0] pieces[1] %names[1] ... (a text cut at its %-names, with these put in)."""
    out = [pieces[0]]
    for name, piece in zip(names, pieces[1:]):
        out += ("%", name, piece)
    return "".join(out)


def _build_templated(rc, body, errs: _Errors, filename: str, comp_names) -> Computation | None:
    """A body read by a template (frontend.TemplateBody): the instructions its template's body built
    to, with its own names, lines and literals, a line whose attributes name other computations or
    instructions than the template's read again from its own texts; what _build_fused makes of its
    lines, those being the template's lines with other names.  None when the template's body did not
    build cleanly, the names are not all different and free, or a line read again does not build
    (then its lines are built)."""
    kept = errs.templates.get(body.template)
    names = body.names
    if kept is None or len(set(names)) != len(names) or not _RESERVED.isdisjoint(names):
        return None
    rows, again, root, root_explicit = kept
    fixed, own = body.fixed, body.template.names
    line = body.line
    instrs = []
    add = instrs.append
    defined: dict = {}
    params_seen: dict = {}
    for k, (opcode, shape, operands, decoded, literal, pnum, column, operand_shapes) in enumerate(rows):
        redo = again.get(k) if again else None
        if redo is not None and (redo[4] or (fixed is not None and any(fixed[j] != own[j] for j in redo[3]))):
            shape_text, ops, attr, on_line, _ = redo
            inst = instruction_of_parts(names[k], opcode, shape_text, _weave(ops, operands(names) if operands else ()),
                                        _weave(attr, [(fixed or own)[j] for j in on_line]), line + k, column,
                                        filename, defined, comp_names, params_seen, None)
            if inst is None:
                return None
        else:
            if literal is not None:
                literal = DeferredLiteral(shape, literal[0]) if literal[1] else _literal_of_text(literal[0], shape)
                if literal is None:
                    return None
            inst = make_instruction(names[k], opcode, shape, operands(names) if operands else (), decoded.copy(),
                                    literal, pnum, filename, line + k, column, operand_shapes)
        if again:
            defined[inst.name] = inst
            if pnum is not None:
                params_seen[pnum] = None
        add(inst)
    return _computation(rc, instrs, names[root], root_explicit, errs, filename)


def _fused_general(ri, rc, errs, filename, defined, comp_names, params_seen, inline, text, instrs):
    """A general-form line of a body read in one pass, built as _build_computation builds it; None
    when it is anything but a plain instruction built without a finding."""
    if ri.name in defined or isinstance(ri, LineInstr) or any(a.kind != "ref" or "#" in (a.name or "")
                                                              for a in ri.args if a.kind != "literal"):
        return None
    reported = len(errs.items)
    src = _source(errs, text)
    _check_instruction_name(ri, errs, src)
    inst = None
    if len(errs.items) == reported:
        scope = _Scope(defined, defined, instrs, rc.name, filename)
        inst = _build_instruction(ri, errs, filename, defined, comp_names, params_seen, rc.name, inline, text,
                                  scope)
    return inst if len(errs.items) == reported else None


class _Scope:
    """What an instruction of a computation may refer to, and where lifted instructions go."""

    def __init__(self, names, defined, instrs, comp_name, filename):
        self.names = names          # every instruction name of the computation
        self.defined = defined      # those defined so far -> Instruction (None if it failed)
        self.instrs = instrs        # the instructions built so far
        self.comp_name = comp_name
        self.filename = filename
        self.tuple_access: dict[tuple[str, int], str] = {}   # (tuple, index) -> its get-tuple-element


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


_DECODED: dict = {}


_COMMENTS = re.compile(r"/\*.*?\*/")


def _tuple_shape_text(text):
    from .frontend import shape_text_cached
    return shape_text_cached(text)


def _fast_instruction(li, filename, names, comp_names, params_seen):
    """The happy path for an INSTR_LINE token: returns the Instruction, or None to let the general
    path (which reports located errors) handle it."""
    m = li.m
    tok = li.tok
    return instruction_of_parts(li.name, m.group(4), m.group(3), m.group(5), tok[m.end():], tok.line,
                                tok.column + m.start(2), filename, names, comp_names, params_seen, li)


_OPCODES = ops.OPCODES
_SHAPE_TEXTS: dict = {}          # shape text -> Shape (or False: not a shape the fast path reads)
_ATTR_TEXTS: dict = {}   # (opcode, attributes text) -> (attrs, called, instructions, replication) or False
_MAX_TEXTS = 1 << 16


def _shape_of_text(text):
    shape = _SHAPE_TEXTS.get(text)
    if shape is None:
        try:
            shape = parse_array_shape(text) if text[0] != "(" else _tuple_shape_text(text)
        except ValueError:
            shape = False
        if len(_SHAPE_TEXTS) >= _MAX_TEXTS:
            _SHAPE_TEXTS.clear()
        _SHAPE_TEXTS[text] = shape
    return shape


def _attrs_of_text(opcode, spec, text):
    """The decoded attributes of an instruction's attribute text (from the ',' after its operands),
    with the computations and instructions they name, or False when the fast path must not build
    it; kept by (opcode, text): an optimized dump repeats the same attribute texts many times."""
    key = (opcode, text)
    hit = _ATTR_TEXTS.get(key)
    if hit is None:
        hit = _decode_attr_text(opcode, spec, text) or False
        if len(_ATTR_TEXTS) >= _MAX_TEXTS:
            _ATTR_TEXTS.clear()
        _ATTR_TEXTS[key] = hit
    return hit


def _decode_attr_text(opcode, spec, text):
    if opcode in ("async-update", "async-done"):
        return None             # checked against its async-start on the general path
    attrs = {}
    called, named = [], []
    spec_attrs = spec.attrs
    common = ops.COMMON_ATTRS
    for am in ATTR_SPLIT.finditer(text):
        aname = sys.intern(am.group(1))
        raw = am.group(2)
        if aname in attrs:
            return None
        if aname == "metadata" or aname == "backend_config":
            # one object for equal texts (instructions of several opcodes repeat a text): the cache
            # entry stores it once
            key = (aname, raw)
            val = _DECODED.get(key)
            if val is None:
                val = Metadata(raw) if aname == "metadata" else BackendConfig(raw)
                if len(_DECODED) < 100000:
                    _DECODED[key] = val
            attrs[aname] = val
            continue
        kind = spec_attrs.get(aname) or common.get(aname)
        if kind is None:
            return None
        key = (kind, raw)
        val = _DECODED.get(key)
        if val is None:
            try:
                val = decoder(kind)(decode_value(aname, raw))
            except Exception:
                return None
            if len(_DECODED) < 100000:
                _DECODED[key] = val
        attrs[aname] = val
        if kind == "computation":
            called.append(val.name)
        elif kind == "computations":
            called.extend(r.name for r in val)
        elif kind == "instructions":
            named.extend(val)
    for req in spec.required:
        if req not in attrs:
            return None
    return attrs, tuple(called), tuple(named), attrs.get("parameter_replication") is not None


_LITERAL_TEXTS: dict = {}       # (text, id(shape)) -> (shape, the array of values)


def _literal_of_text(text, shape):
    """parse_literal(text, shape), or None where it raises; an array's values are decoded once per
    text and shape (a dump repeats its small constants), each constant getting its own copy."""
    lit = deferred_literal(text, shape)      # (decoded when first read: no NumPy to check a module)
    if lit is not None:
        return lit
    key = (text, id(shape))
    hit = _LITERAL_TEXTS.get(key)
    if hit is not None and hit[0] is shape:
        return Literal(shape, hit[1].copy(), False)
    try:
        literal = parse_literal(text, shape)
    except (LiteralError, KeyError, ValueError):
        return None
    if not literal.elided and not shape.is_tuple and len(text) <= 256:
        if len(_LITERAL_TEXTS) >= _MAX_TEXTS:
            _LITERAL_TEXTS.clear()
        _LITERAL_TEXTS[key] = (shape, literal.value.copy())     # (keeping the shape alive: its id stays its own)
    return literal


def instruction_of_parts(name, opcode, shape_text, ops_text, attr_text, line, column, filename, names,
                         comp_names, params_seen, li):
    """The Instruction of an instruction line's parts (the fused regex's groups, or an INSTR_LINE
    token's), or None to let the general path (which reports located errors) handle it.  `names`:
    the instructions defined so far; `li`: the line's LineInstr, or an object whose `name_tok`
    locates a parameter's number (None: not asked, the caller redoes the computation on an error)."""
    spec = _OPCODES.get(opcode)
    if spec is None:
        return None
    if spec.name == opcode:
        opcode = spec.name      # the table's string: one object for every instruction of the opcode
    shape = _SHAPE_TEXTS.get(shape_text) or _shape_of_text(shape_text)
    if shape is False:
        return None
    literal = None
    pnum = None
    operands: tuple = ()
    if opcode == "parameter":
        try:
            pnum = int(ops_text)
        except ValueError:
            return None
        if pnum in params_seen or pnum < 0:
            return None
    elif opcode == "constant":
        literal = _literal_of_text(ops_text, shape)
        if literal is None:
            return None
    else:
        if "/*" in ops_text:
            ops_text = _COMMENTS.sub("", ops_text)
        if ops_text.strip():
            if "\t" in ops_text:
                spelled = [o.strip().lstrip("%") for o in ops_text.split(",")]
            else:       # (the same: an INSTR_LINE operand is a name or a number, without blanks inside)
                spelled = ops_text.replace(" ", "").replace("%", "").split(",")
            try:        # each operand the very string of its definition's name (the cache stores it once)
                operands = tuple([names[o].name for o in spelled])
            except KeyError:            # not defined (yet)
                return None
            except AttributeError:      # one defined by a line that failed (None)
                operands = tuple(spelled)
        n = len(operands)
        if n < spec.min_operands or (spec.max_operands is not None and n > spec.max_operands):
            return None
    if attr_text:
        hit = _ATTR_TEXTS.get((opcode, attr_text)) or _attrs_of_text(opcode, spec, attr_text)
        if hit is False:
            return None
        decoded, called, named, replication = hit
        for c in called:
            if c not in comp_names:
                return None
        for r in named:
            if r not in names:
                return None
        attrs = dict(decoded)
        if replication and len(attrs["parameter_replication"]) != len(list(shape.leaves())):
            return None
    else:
        if spec.required or opcode in ("async-update", "async-done"):
            return None
        attrs = {}
    if opcode == "conditional" and operands and _conditional_attr_problem(
            getattr(names.get(operands[0]), "shape", None), attrs) is not None:
        return None
    if pnum is not None:
        params_seen[pnum] = li.name_tok if li is not None else None
    return make_instruction(name, opcode, shape, operands, attrs, literal, pnum, filename, line, column, None)


def RawInstrLike(name, shape, number, tok):
    from .frontend import Arg, RawInstr, Pos
    pos = Pos(name, getattr(tok, "line", 0), getattr(tok, "column", 0))
    return RawInstr(False, pos, shape, None, Pos("parameter", pos.line, pos.column),
                    [Arg("literal", text=str(number), tok=pos)], [])


def _build_instruction(ri, errs: _Errors, filename, names, comp_names, params_seen, comp_name,
                       inline, text, scope=None) -> Instruction | None:
    """`names` are the instructions defined so far (those an operand may name); `scope.names`
    all the computation's instructions; `comp_names` the computations defined so far."""
    src = _source(errs, text)
    every = scope.names if scope is not None else names
    loc = _loc(filename, ri.name_tok if ri.name_tok else ri.opcode_tok)
    bad = _OPCODE_CHARS.search(ri.opcode) if ri.opcode else None
    if bad is not None or not ri.opcode:
        ch = ri.opcode[bad.start()] if bad is not None else ""
        errs.add(_shifted(ri.opcode_tok, bad.start() if bad is not None else 0),
                 f"expects an opcode, got '{ri.opcode}': unexpected character '{ch}'", "E050", ri.name)
        return None
    spec = _spec_for(ri.opcode)
    if spec is None:
        for suffix in _ASYNC_SUFFIX:
            if ri.opcode.endswith(suffix) and ri.opcode[: -len(suffix)] not in ops.OPCODES:
                errs.add(ri.opcode_tok, f"unknown async wrapped opcode '{ri.opcode[: -len(suffix)]}' in "
                         f"'{ri.opcode}' (<opcode>{suffix} wraps an existing opcode)", "E050", ri.name)
                return None
        errs.add(ri.opcode_tok, f"unknown opcode '{ri.opcode}'", "E050", ri.name)
        return None
    if _too_deep(ri.shape, _shape_pos(ri, src), errs, ri.name):
        return None
    heads = _head(ri, spec, errs, src, names, every, params_seen, comp_name)
    if heads is None:
        return None
    literal, pnum, operands, operand_shapes = heads
    attrs = _decode_attributes(ri, spec, errs, src, filename, names, every, comp_names, inline, text)
    _check_attributes(ri, spec, attrs, operands, operand_shapes, names, comp_names, errs)
    has_shapes = any(s is not None for s in operand_shapes)
    return Instruction(ri.name, ri.opcode, ri.shape, tuple(operands), frozen_map(attrs), literal, pnum, loc,
                       tuple(operand_shapes) if has_shapes else None)


def _head(ri, spec, errs, src, names, every, params_seen, comp_name):
    """(literal, parameter number, operand names, operand shapes) of an instruction: a parameter's
    number, a constant's literal, or the operands; None after an error that ends the instruction."""
    literal = None
    pnum = None
    operands: list[str] = []
    operand_shapes: list = []
    if ri.opcode == "parameter":
        if len(ri.args) != 1 or ri.args[0].kind != "literal" or not _is_int(ri.args[0].text):
            errs.add(ri.opcode_tok, "parameter takes its number: parameter(N)", "E051", ri.name)
            return None
        pnum = int(ri.args[0].text)
        if pnum < 0:
            errs.add(ri.args[0].tok or ri.opcode_tok, f"parameter number must be >= 0, got {pnum}", "E051",
                     ri.name)
            return None
        if pnum in params_seen:
            errs.add(ri.args[0].tok or ri.opcode_tok, f"parameter number {pnum} is already used in computation "
                     f"'{comp_name}' (each parameter has its own number)", "E052", ri.name)
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
        if ri.shape is not None and ri.shape.element_type in ("token", "opaque"):
            errs.add(_shape_pos(ri, src), f"{ri.shape.element_type}-shaped constants are not allowed: "
                     f"a constant has an array or tuple shape, got {ri.shape}", "E054", ri.name)
            return None
        if ri.shape is not None and any(s.element_type in ("token", "opaque") for s in ri.shape.leaves()):
            errs.add(_shape_pos(ri, src), f"token-shaped constants are not allowed: the tuple shape "
                     f"{ri.shape} has a token or opaque element", "E054", ri.name)
            return None
        if ri.shape is not None:
            literal = deferred_literal(txt, ri.shape)
        if ri.shape is not None and literal is None:
            try:
                literal = parse_literal(txt, ri.shape)
            except LiteralError as e:
                errs.add(_offset_in_token(a.tok or ri.opcode_tok, txt, getattr(e, "offset", 0)),
                         f"constant: {e}", "E055", ri.name)
                return None
    else:
        for a in ri.args:
            if a.kind != "ref":
                errs.add(a.tok or ri.opcode_tok, f"{ri.opcode} takes operands, not the literal '{a.text}'", "E056",
                         ri.name)
                continue
            spelled = str(a.tok) if a.tok is not None else a.name
            if spelled[:1] != "%" and a.name in _RESERVED:
                errs.add(a.tok, f"expects an operand name, got '{a.name}', which is "
                         f"{'an element type' if a.name in ELEMENT_TYPES else 'a keyword'} (write %{a.name})",
                         "E057", ri.name)
                continue
            if not a.name:
                what = f" after the shape {a.shape.to_str(False)}" if a.shape is not None else ""
                errs.add(a.tok or src.find_after(ri.opcode_tok, "(") or ri.opcode_tok,
                         f"expects an operand name{what} (only a lone instruction may leave its operands unnamed)",
                         "E057", ri.name)
                continue
            if a.name not in names:
                if a.name in every and a.name != ri.name:
                    later = every[a.name]
                    line = getattr(getattr(later, "name_tok", None), "line", 0)
                    errs.add(a.tok, f"operand '{a.name}' of '{ri.name}' is used before its definition"
                             f"{f' (on line {line})' if line else ''}: an instruction must be defined before "
                             "its users", "E059", ri.name)
                elif a.name == ri.name:
                    errs.add(a.tok, f"instruction '{ri.name}' uses itself as an operand", "E059", ri.name)
                else:
                    errs.add(a.tok, f"operand '{a.name}' of '{ri.name}' is not defined in computation "
                             f"'{comp_name}'", "E057", ri.name)
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
            errs.add(src.find_after(ri.opcode_tok, "(") or ri.opcode_tok,
                     f"{ri.opcode} expects {want} operand{'s' if want != '1' else ''}, but has {n}", "E058",
                     ri.name)
        else:
            _check_structure(ri.opcode, ri.shape, n, _shape_pos(ri, src),
                             src.find_after(ri.opcode_tok, "(") or ri.opcode_tok, errs, ri.name)
    return literal, pnum, operands, operand_shapes


def _decode_attributes(ri, spec, errs, src, filename, names, every, comp_names, inline, text) -> dict:
    """The instruction's attributes decoded by the opcode table's kinds (errors recorded, the
    attribute left out)."""
    attrs: dict = {}
    for aname, value, tok in _merge_mesh_device_ids(ri.attrs):
        _check_attr_glued(tok, aname, errs, src, ri.name)
        kind = spec.attrs.get(aname) or ops.COMMON_ATTRS.get(aname)
        if kind is None:
            known = sorted(set(spec.attrs) | set(ops.COMMON_ATTRS))
            errs.add(tok, f"unexpected attribute '{aname}' for {ri.opcode} (it takes: {', '.join(known)})", "E060",
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
            errs.add(_attr_error_pos(src, tok, aname, e), f"{ri.opcode} attribute {aname}: {e}", "E062", ri.name)
            continue
        attrs[aname] = decoded
        _check_refs(decoded, tok, aname, errs, comp_names, names, ri, src, every)
    return attrs


def _check_attributes(ri, spec, attrs, operands, operand_shapes, names, comp_names, errs):
    """What an instruction's attributes must satisfy together with its operands and shape."""
    if spec.family == "async" or ri.opcode in ("async-update", "async-done"):
        _check_async_chain(ri, attrs, operands, names, comp_names, errs)
    if ri.opcode == "conditional" and operands:
        sel = operand_shapes[0] or getattr(names.get(operands[0]), "shape", None)
        problem = _conditional_attr_problem(sel, {a for a, _, _ in ri.attrs})
        if problem is not None:
            aname, msg = problem
            at = next((t for a, _, t in ri.attrs if a == aname), None) or ri.opcode_tok
            errs.add(at, msg, "E060" if aname else "E063", ri.name)
    rep = attrs.get("parameter_replication")
    if rep is not None and ri.shape is not None:
        leaves = len(list(ri.shape.leaves()))
        if leaves != len(rep):
            at = next((t for a, _, t in ri.attrs if a == "parameter_replication"), ri.opcode_tok)
            errs.add(at, f"parameter has {leaves} leaf buffer{'s' if leaves != 1 else ''}, but "
                     f"parameter_replication has {len(rep)} element{'s' if len(rep) != 1 else ''}", "E062", ri.name)
    for req in spec.required:
        if req not in attrs and not any(a == req for a, _, _ in ri.attrs):
            errs.add(ri.opcode_tok, f"attribute {req} is expected but not seen: {ri.opcode} requires it", "E063",
                     ri.name)


def _merge_mesh_device_ids(attrs):
    """`replica_groups=mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'x'}` reads as two attributes; XLA's
    mesh takes the `device_ids=(...)` after it, so the two are put back together."""
    out = list(attrs)
    for k in range(len(out) - 1):
        name, value, tok = out[k]
        nxt = out[k + 1]
        if (name == "replica_groups" and nxt[0] == "device_ids" and isinstance(value, Seq)
                and len(value.items) == 2 and str(value.items[0]) == "mesh"):
            extra = nxt[1].items if isinstance(nxt[1], Seq) else (nxt[1],)
            out[k] = (name, Seq((*value.items, KV("device_ids", extra[0]), *extra[1:])), tok)
            del out[k + 1]
            break
    return out


def _check_async_callers(comps, errs):
    """XLA: each async computation has exactly one async-start calling it."""
    first: dict[str, str] = {}
    for c in comps:
        for inst in c.instructions:
            if inst.opcode == "async-start" and inst.attrs.get("calls") is not None:
                name = inst.attrs["calls"].name
                if name in first:
                    errs.add(inst.loc, f"computation {name} is called by more than one async op: "
                             f"'{first[name]}' and '{inst.name}' (each async-start needs its own computation)",
                             "E069", inst.name)
                else:
                    first[name] = inst.name


def _async_step(opcode: str):
    """('start' | 'update' | 'done', the wrapped opcode of the sugar spelling or None), or None."""
    for step in ("start", "update", "done"):
        suffix = "-" + step
        if opcode.endswith(suffix):
            base = opcode[: -len(suffix)]
            if base == "async":
                return step, None
            if opcode not in ops.OPCODES and base in ops.OPCODES:
                return step, base
    return None


def _raw_root_opcode(rc) -> str | None:
    instrs = getattr(rc, "instrs", None)
    if not instrs:
        return None
    root = next((ri for ri in instrs if ri.is_root), instrs[-1])
    return root.m.group(4) if isinstance(root, LineInstr) else root.opcode


def _check_async_chain(ri, attrs, operands, names, comp_names, errs):
    """XLA's parser: async-update / async-done (or the sugar <op>-update / <op>-done) take the async
    op before them as their one operand, and inherit its wrapped computation, opcode and thread;
    whatever they spell out must agree with what they inherit."""
    step = _async_step(ri.opcode)
    if step is None or step[0] == "start" or len(operands) != 1:
        return
    _, wrapped = step
    prev = names.get(operands[0])
    if prev is None:
        return
    chain = prev
    seen = 0
    while chain is not None and seen < 10000:
        cs = _async_step(chain.opcode)
        if cs is None or cs[0] == "done":
            at = ri.args[0].tok if ri.args and ri.args[0].tok is not None else ri.opcode_tok
            errs.add(at, f"{ri.opcode} expects the async-start or async-update before it as its operand, got "
                     f"'{prev.name}' ({prev.opcode})", "E069", ri.name)
            return
        if cs[0] == "start":
            break
        chain = names.get(chain.operands[0]) if chain.operands else None
        seen += 1
    if chain is None:
        return
    start_wrapped = _async_step(chain.opcode)[1]
    calls = chain.attrs.get("calls")
    if start_wrapped is None and calls is not None:
        start_wrapped = _raw_root_opcode(comp_names.get(calls.name))

    def at(aname):
        return next((t for a, _, t in ri.attrs if a == aname), ri.opcode_tok)
    if wrapped is not None and start_wrapped is not None and wrapped != start_wrapped:
        errs.add(ri.opcode_tok, f"expect async wrapped opcode to be {start_wrapped}, but got {wrapped} "
                 f"('{chain.name}' starts an async {start_wrapped})", "E069", ri.name)
    thread = attrs.get("async_execution_thread")
    start_thread = chain.attrs.get("async_execution_thread", "main")
    if thread is not None and thread != start_thread:
        errs.add(at("async_execution_thread"), f"expect async_execution_thread to be {start_thread}, but got "
                 f"{thread} (async-update and async-done run on the thread of '{chain.name}')", "E069", ri.name)
    mine = attrs.get("calls")
    if mine is not None and calls is not None and mine.name != calls.name:
        errs.add(at("calls"), f"expect async_wrapped_computation to be {calls.name}, but got {mine.name} "
                 f"('{chain.name}' calls {calls.name})", "E069", ri.name)


def _conditional_attr_problem(selector, attrs) -> tuple | None:
    """XLA reads a conditional's attributes by its selector's type: pred[] takes true_computation and
    false_computation, s32[] takes branch_computations, and the other spelling is an unexpected
    attribute.  (attribute to blame or None, message), or None when they agree."""
    if selector is None or selector.is_tuple or selector.dims or selector.element_type not in ("pred", "s32"):
        return None             # a selector of the wrong shape or type is reported by the shape rule
    if selector.element_type == "pred":
        wanted, other = ("true_computation", "false_computation"), ("branch_computations",)
        why = "a conditional with a pred[] selector takes true_computation and false_computation"
    else:
        wanted, other = ("branch_computations",), ("true_computation", "false_computation")
        why = "a conditional with an s32[] selector takes branch_computations"
    for a in other:
        if a in attrs:
            return a, f"unexpected attribute '{a}': {why}"
    for a in wanted:
        if a not in attrs:
            return None, f"attribute {a} is expected but not seen: {why}"
    return None


def _check_refs(decoded, tok, aname, errs, comp_names, names, ri, src=None, every=None):
    """Called computations and control predecessors must exist, and be defined earlier."""
    refs = []
    if isinstance(decoded, ComputationRef):
        refs = [decoded]
    elif isinstance(decoded, tuple) and decoded and isinstance(decoded[0], ComputationRef):
        refs = list(decoded)
    for r in refs:
        if r.name not in comp_names:
            at = _ref_pos(src, tok, aname, r.name) if src is not None else tok
            everywhere = getattr(comp_names, "everywhere", {})
            if r.name in everywhere:
                errs.add(at, f"computation '{r.name}' is used before its definition: a called computation must "
                         "be defined before its callers", "E064", ri.name)
            else:
                errs.add(at, f"computation does not exist: {aname} names '{r.name}', which is not defined",
                         "E064", ri.name)
    if aname == "control-predecessors":
        for n in decoded:
            if n not in names:
                at = _ref_pos(src, tok, aname, n) if src is not None else tok
                if every is not None and n in every:
                    errs.add(at, f"control predecessor '{n}' is used before its definition", "E065", ri.name)
                else:
                    errs.add(at, f"instruction '{n}' is not defined: control predecessor of '{ri.name}'", "E065",
                             ri.name)


def _inline_computation(group, tok, ri, aname, errs, filename, comp_names, inline, text):
    """A computation written in place, `to_apply={ ... }`: parsed at its place in the text (so its
    instructions keep their lines and columns) and lifted into the module as `<instr>.<attr>`."""
    from .frontend import RawComputation, Tok, parse_raw
    from ..ir.attributes import InlineComputation
    body = group.text
    src = _source(errs, text)
    start = src.text.find(body, src.offset(tok)) if body else -1
    try:
        if start >= 0:
            at = src.at(start)
            # `c {...}` laid out where the braces are: a computation named c whose body is the group
            if at.column >= 2:
                padded = "\n" * (at.line - 1) + " " * (at.column - 2) + "c" + body
            else:
                padded = "\n" * (at.line - 2) + "c\n" + body
            rcs = parse_raw(padded, filename).computations
            instrs = rcs[0].instrs if rcs else []
        else:
            instrs = parse_raw(body, filename, start_line=(tok.line or 1) - 1)
    except HloSyntaxError as e:
        errs.items.extend(e.diagnostics)
        return None
    # XLA names inline computations _, _.1, _.2, ...
    cname = "_"
    everywhere = getattr(comp_names, "everywhere", comp_names)
    k = 0
    while cname in everywhere or cname in comp_names:
        k += 1
        cname = f"_.{k}"
    name_tok = Tok("NAME", cname, None, tok.line, tok.column)
    rc = RawComputation(False, name_tok, None, None, instrs, None)
    inline.append(_build_computation(rc, errs, filename, comp_names, inline, text))
    comp_names[cname] = rc
    if everywhere is not comp_names:
        everywhere[cname] = rc
    return InlineComputation(cname)


# ----------------------------------------------------------------------------- checks and positions

_NAME_CHARS = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_OPCODE_CHARS = re.compile(r"[^a-z0-9\-]|^[^a-z]")
_KEYWORDS = KEYWORDS                   # (ir/printer.py: the printer writes these names with their %)
# Words XLA's lexer never reads as a bare name: element types and keywords (`%`-names may be keywords).
_RESERVED = RESERVED_NAMES
# Opcodes whose result shape or operand count is checked beyond the opcode table.
_CHECKED_OPCODES = frozenset({"tuple", "dynamic-reshape"})


def _name_problem(spelled: str, what: str, instruction: bool):
    """(message, offset in `spelled`) when `spelled` (with its '%', if any) is not a valid name."""
    pct = spelled[:1] == "%"
    n = spelled[1:] if pct else spelled
    if _NAME_CHARS.fullmatch(n) is None:
        if not n:
            return f"expects {what} after '%'", 0
        if not (n[0].isascii() and (n[0].isalpha() or n[0] == "_")):
            return (f"expects {what}, got '{spelled}': " + (
                "'%' must be followed by a letter or '_'" if pct else "a name starts with a letter or '_'"),
                0)
        k = next(k for k, c in enumerate(n) if not (c.isascii() and (c.isalnum() or c in "_.-")))
        return f"unexpected character '{n[k]}' in {what.split(' after')[0]} '{spelled}'", k + pct
    if not pct and n in _RESERVED:
        if n in ELEMENT_TYPES:
            return f"expects {what}, got '{n}', which is an element type (rename it, e.g. {n}_)", 0
        return f"expects {what}, got '{n}', which is a keyword (rename it, or write %{n})", 0
    if pct and instruction and n in ELEMENT_TYPES:
        return (f"illegal instruction name: '%{n}' is an element type (rename it, e.g. %{n}_)", 0)
    return None


def _check_instruction_name(ri, errs, src):
    if isinstance(ri, LineInstr):
        # INSTR_LINE names match %?[A-Za-z_][\w.\-]*: only non-ASCII letters can be wrong
        name = ri.name
        glued = ri.tok[ri.m.end(2)] == "="
        if name.isascii() and name not in _RESERVED and not glued:
            return      # the common case, cheaply
        spelled = ri.m.group(2)
        tok = ri.name_tok
    else:
        tok = ri.name_tok
        spelled = str(tok)
        if not spelled or not getattr(tok, "line", 0):
            return      # synthesized (nested or anonymous instructions)
        off = src.offset(tok) + len(spelled)
        glued = src.text.startswith("=", off)
    problem = _name_problem(spelled, "an instruction name", instruction=True)
    if problem is not None:
        msg, off = problem
        errs.add(_shifted(tok, off), msg, "E044", ri.name)
    elif glued and spelled[:1] != "%":
        errs.add(tok, f"expects an instruction name: '{spelled}=' reads as an attribute name; put a space "
                 f"before '=' (or write %{spelled})", "E044", ri.name)


def _check_attr_glued(tok, aname, errs, src, instr_name):
    """`name =value`: XLA reads an attribute name only when '=' follows it at once."""
    if not getattr(tok, "line", 0) or getattr(tok, "type", "") in ("METADATA", "BACKEND_CONFIG"):
        return
    off = src.offset(tok) + len(aname)
    if src.text[off:off + 1] not in ("=", "") and src.text[off:off + 1].isspace():
        errs.add(tok, f"expects attribute name: '{aname}' must be followed by '=' with no space in between "
                 f"(write {aname}=...)", "E066", instr_name)


def _too_deep(shape, at, errs, name) -> bool:
    """Report a shape whose tuples nest deeper than hlo handles (ir/shape.py MAX_SHAPE_DEPTH)."""
    if shape is None or shape.tuple_shapes is None:
        return False
    depth = shape_depth(shape)
    if depth <= MAX_SHAPE_DEPTH:
        return False
    errs.add(at, f"the shape nests tuples {depth} deep; hlo handles at most {MAX_SHAPE_DEPTH} levels "
             "(XLA's parser: 32768)", "E075", name)
    return True


def _check_structure(opcode, shape, n_operands, shape_at, paren_at, errs, name):
    """Checks that need no shape inference, where XLA would crash."""
    if shape is None:
        return
    if _too_deep(shape, shape_at, errs, name):
        return
    if opcode == "tuple" and not shape.is_tuple:
        errs.add(shape_at, f"tuple result shape must be a tuple, got {shape.to_str(False)} (write e.g. "
                 f"({shape.to_str(False)}) for a "
                 "tuple of one element)", "E067", name)
    elif opcode == "dynamic-reshape" and not shape.is_tuple and n_operands != 1 + shape.rank:
        errs.add(paren_at, f"dynamic-reshape needs one size operand per result dimension: the result "
                 f"{shape.to_str(False)} has {shape.rank} dimension{'s' if shape.rank != 1 else ''}, so it takes "
                 f"{1 + shape.rank} operands (the array and {shape.rank} scalar sizes), but has {n_operands}",
                 "E067", name)


def _check_fast(inst, li, errs, src):
    """The checks of _build_instruction that the fast path does not make."""
    tok, m = li.tok, li.m
    shape_at = _At(tok.line, tok.column + m.start(3))
    paren_at = _At(tok.line, tok.column + m.start(5) - 1)
    _check_structure(inst.opcode, inst.shape, len(inst.operands), shape_at, paren_at, errs, inst.name)
    if not _RESERVED.isdisjoint(inst.operands):
        from .frontend import OPERAND_RE
        for om in OPERAND_RE.finditer(m.group(5)):
            o = om.group(0)
            if o in _RESERVED:
                errs.add(_At(tok.line, tok.column + m.start(5) + om.start()),
                         f"expects an operand name, got '{o}', which is "
                         f"{'an element type' if o in ELEMENT_TYPES else 'a keyword'} (write %{o})", "E057",
                         inst.name)


_TUPLE_ACCESS = re.compile(r"(.+?)((?:#\d+)+)")


def _lift_tuple_access(ri, scope, errs):
    """Our extension `%t#1` (element 1 of the tuple t): a get-tuple-element of t is added just
    before the first instruction that uses it (one per tuple and index), and the operand names it."""
    for a in ri.args:
        if a.kind != "ref" or "#" not in a.name:
            continue
        m = _TUPLE_ACCESS.fullmatch(a.name)
        if m is None:
            continue
        cur = m.group(1)
        inst = scope.defined.get(cur)
        if inst is None:
            a.name = cur            # reported as an undefined (or later) operand
            continue
        for idx in map(int, m.group(2)[1:].split("#")):
            shape = inst.shape
            if shape is None or not shape.is_tuple:
                errs.add(a.tok, f"'{a.name}' takes element {idx} of '{cur}', but '{cur}' has "
                         f"{'no shape' if shape is None else f'the shape {shape}, not a tuple'}", "E068", ri.name)
                a.name = cur
                break
            if idx >= len(shape.tuple_shapes):
                errs.add(a.tok, f"'{a.name}': index {idx} is out of range for '{cur}', a tuple of "
                         f"{len(shape.tuple_shapes)} element{'s' if len(shape.tuple_shapes) != 1 else ''} "
                         f"{shape}", "E068", ri.name)
                a.name = cur
                break
            key = (cur, idx)
            gte = scope.tuple_access.get(key)
            if gte is None:
                base = f"{cur}.{idx}"
                gte, k = base, 1
                while gte in scope.names or gte in scope.defined:
                    k += 1
                    gte = f"{base}.{k}"
                new = Instruction(gte, "get-tuple-element", shape.tuple_shapes[idx], (cur,), {"index": idx}, None,
                                  None, _loc(scope.filename, a.tok))
                scope.instrs.append(new)
                scope.defined[gte] = new
                scope.names[gte] = new
                scope.tuple_access[key] = gte
            cur = gte
            inst = scope.defined[gte]
        else:
            a.name = cur


def _shape_pos(ri, src):
    """Where the result shape of an instruction is written (a tuple shape has no single token)."""
    if ri.shape_tok is not None and getattr(ri.shape_tok, "line", 0):
        return ri.shape_tok
    tok = ri.name_tok
    if tok is not None and str(tok) and getattr(tok, "line", 0):
        off = src.skip(src.offset(tok) + len(str(tok)))
        if src.text.startswith("=", off):
            return src.at(src.skip(off + 1))
    return ri.opcode_tok


def _root_keyword(ri, src):
    """The position of the ROOT keyword of an instruction."""
    if isinstance(ri, LineInstr):
        return _At(ri.tok.line, ri.tok.column)
    return src.keyword_before(ri.name_tok, "ROOT")


def _attr_error_pos(src, tok, aname, err):
    """Where an attribute's decoding error points: the part of the value at fault, else its start."""
    if not getattr(tok, "line", 0):
        return tok
    start = src.value_start(tok, aname)
    return src.at(_locate(src, start, err) if err.at is not None else start)


def _locate(src, start, err) -> int:
    needle = needle_of(err.at)
    end = src.value_end(start)
    k = err.nth
    for t, o in value_tokens(src.text[start:end]):
        if t == needle or (needle is not None and t == "%" + needle):
            if k == 0:
                return start + o
            k -= 1
    return start


def _ref_pos(src, tok, aname, name):
    if not getattr(tok, "line", 0):
        return tok
    start = src.value_start(tok, aname)
    return src.at(_locate(src, start, AttrError("", at=name)))


def _offset_in_token(tok, text, offset):
    """The position of `offset` in `text`, the text of token `tok` (which may span lines)."""
    nl = text.count("\n", 0, offset)
    line = getattr(tok, "line", 0) or 0
    if not nl:
        return _At(line, (getattr(tok, "column", 0) or 0) + offset)
    return _At(line + nl, offset - text.rfind("\n", 0, offset))


def _shifted(tok, offset):
    if not offset:
        return tok
    return _At(getattr(tok, "line", 0) or 0, (getattr(tok, "column", 0) or 0) + offset)


class _At:
    """A 1-based position, standing in for a token in diagnostics."""
    __slots__ = ("line", "column")

    def __init__(self, line, column):
        self.line, self.column = line, column

    def __repr__(self):
        return f"{self.line}:{self.column}"


_SKIP = re.compile(r"(?:\s+|/\*.*?\*/|//[^\n]*)*", re.S)


_NEWLINE = re.compile("\n")


class _Source:
    """Offsets in the module text <-> 1-based (line, column), and small searches around tokens."""

    def __init__(self, text: str):
        self.text = text
        self._starts = [0]          # where the lines start, as far as they were asked for
        self._all = False
        self.known: dict = {}       # line -> where it starts, for lines beyond those (see _build_fused)

    def offset(self, tok) -> int:
        line = getattr(tok, "line", 0) or 1
        col = getattr(tok, "column", 0) or 1
        starts = self._starts
        if len(starts) < line and line in self.known:
            return min(self.known[line] + col - 1, len(self.text))
        if len(starts) < line and not self._all:        # (only the lines up to the token's)
            starts.extend(m.end() for m in islice(_NEWLINE.finditer(self.text, starts[-1]), line - len(starts)))
            self._all = len(starts) < line
        if line > len(starts):
            return len(self.text)
        return min(starts[line - 1] + col - 1, len(self.text))

    def at(self, offset: int) -> _At:
        from bisect import bisect_right
        starts = self._starts
        if not self._all and starts[-1] <= offset:      # (only the lines up to the offset's)
            starts.extend(m.end() for m in _NEWLINE.finditer(self.text, starts[-1], offset))
        i = bisect_right(starts, offset) - 1
        return _At(i + 1, offset - starts[i] + 1)

    def eof(self) -> _At:
        return self.at(len(self.text))

    def skip(self, offset: int) -> int:
        return _SKIP.match(self.text, offset).end()

    def find_after(self, tok, ch):
        """The position of `ch` when it is the next thing after token `tok`."""
        if not getattr(tok, "line", 0):
            return None
        off = self.skip(self.offset(tok) + len(str(tok)))
        return self.at(off) if self.text.startswith(ch, off) else None

    def keyword_before(self, tok, keyword):
        """The position of `keyword` when it is the last thing before token `tok` (else `tok`)."""
        if not getattr(tok, "line", 0):
            return tok
        off = self.offset(tok)
        k = self.text.rfind(keyword, 0, off)
        if k >= 0 and not self.text[k + len(keyword):off].strip():
            return self.at(k)
        return tok

    def empty_body_end(self, name_tok):
        """The '}' of the empty body of the computation named by `name_tok`."""
        if not getattr(name_tok, "line", 0):
            return None
        m = re.compile(r"\{(?:\s|/\*.*?\*/|//[^\n]*)*\}", re.S).search(self.text, self.offset(name_tok))
        return self.at(m.end() - 1) if m else None

    def value_start(self, tok, aname) -> int:
        off = self.skip(self.offset(tok) + len(aname))
        if self.text.startswith("=", off):
            off = self.skip(off + 1)
        return off

    def value_end(self, start: int) -> int:
        text = self.text
        depth = 0
        i = start
        n = len(text)
        while i < n:
            c = text[i]
            if c == '"':
                i += 1
                while i < n and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif c in "{[(":
                depth += 1
            elif c in "}])":
                if depth == 0:
                    return i
                depth -= 1
            elif depth == 0 and c in ",\n":
                return i
            i += 1
        return n


def _source(errs, text) -> _Source:
    src = getattr(errs, "_source", None)
    if src is None or src.text is not text:
        src = _Source(text)
        errs._source = src
    return src


def _is_int(s) -> bool:
    try:
        int(s)
        return True
    except (TypeError, ValueError):
        return False
