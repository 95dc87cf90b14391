"""What the proto readers share about an HloModuleProto: an index of its ids (computations,
instructions, the async computations XLA prints as one instruction, the order XLA prints computations
in), XLA's enum spellings, which names HLO text can hold (and the messages refusing one), and the
spellings the IR keeps as text: OpMetadata, a named sharding, a literal on one line, a quoted
string (absl::CEscape).  proto_ir.py decodes a module with them.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..ir.opcodes import OPCODES
from .proto_shape import PRIMITIVE_TYPES, ProtoError


NAME_RE = re.compile(r"[A-Za-z_][\w.\-]*", re.ASCII)   # XLA's identifiers are ASCII


def _lexes_as_json_dict(s: str) -> bool:
    from ..ir.printer import lexes_as_json_dict
    return lexes_as_json_dict(s)


# Every string of a proto that becomes text is either quoted (absl_cescape: it cannot end its
# quotes or its line) or, where the text holds it bare, checked to be one token of the parser that
# reads back as the same string; what is neither is refused (ProtoError names the field).  A
# crafted string never adds, removes or renames instructions.
_KEY = re.compile(r"[A-Za-z0-9_][\w.\-]*", re.ASCII)     # a frontend-attribute key, a statistic's name


def shown_text(s: str) -> str:
    return repr(s if len(s) <= 60 else s[:57] + "...")


def name_label(name: str) -> str:
    """A name as messages show it: as it is when text can hold it, else quoted and cut short."""
    return name if NAME_RE.fullmatch(name) else shown_text(name)


def bare_word(s: str, what: str, where: str) -> str:
    """`s` written bare (a key, a statistic's name); ProtoError when the text cannot hold it."""
    if not _KEY.fullmatch(s):
        raise ProtoError(f"{where}{what} {shown_text(s)} cannot be written as HLO text (it is written unquoted: "
                         "letters, digits, '_', '.', '-' only)")
    return s


def raw_json_ok(s: str, attr: str) -> bool:
    """Whether `attr=s` written raw (XLA writes a value that lexes as a JSON dict unquoted) reads
    back as the same string: one token of the grammar, else it is quoted."""
    if not _lexes_as_json_dict(s):
        return False
    if attr == "frontend_attributes":
        from ..ir.printer import raw_dict_ok
        return raw_dict_ok(s)
    return _backend_config_token().fullmatch("backend_config=" + s) is not None


def _backend_config_token():
    global _BACKEND_CONFIG
    if _BACKEND_CONFIG is None:
        from ..parser.frontend import terminal_pattern
        _BACKEND_CONFIG = re.compile(terminal_pattern("BACKEND_CONFIG"))
    return _BACKEND_CONFIG


_BACKEND_CONFIG = None


_PLAIN = re.compile(r"[\x20\x21\x23-\x26\x28-\x5b\x5d-\x7e]*")


_ESC = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x27: "\\'", 0x5C: "\\\\"}


def absl_cescape(s: str) -> str:
    """absl::CEscape of the UTF-8 bytes: \\n \\r \\t \\" \\' \\\\, other bytes outside
    printable ASCII as three octal digits."""
    if _PLAIN.fullmatch(s):
        return s
    b = s.encode("utf-8", "surrogateescape")
    return "".join(_ESC.get(c) or (chr(c) if 0x20 <= c < 0x7F else f"\\{c:03o}") for c in b)


def quote_text(s: str) -> str:
    return '"' + absl_cescape(s) + '"'


def oneline_literal(lit) -> str:
    """XLA's Literal::PrintWithLayoutOneline: each array with its shape, a tuple as ( a, b ),
    predicates of arrays as 1 / 0."""
    from ..ir.literal import format_literal
    shape = lit.shape
    if shape.is_tuple:
        return "( " + ", ".join(oneline_literal(e) for e in lit.value) + " )"
    if shape.element_type == "token":
        return "token"
    text = format_literal(lit).replace("\n", " ")
    if shape.element_type == "pred" and shape.rank:
        text = text.replace("true", "1").replace("false", "0")
    return f"{shape} {text}"


def payload_bytes(pl, payloads, where: str = "") -> bytes | None:
    """A Payload's bytes: its own value, or the module's payload it names by id."""
    if pl.HasField("value"):
        return pl.value
    if pl.HasField("id"):
        if not 0 <= pl.id < len(payloads):
            raise ProtoError(f"{where}payload id {pl.id} out of the module's {len(payloads)} payloads")
        return payloads[pl.id]
    return None


# OpMetadata's fields in the order XLA prints them: quoted strings, numbers (when not 0), a list
_MD_FIELDS = (("op_type", quote_text), ("op_name", quote_text), ("source_file", quote_text), ("source_line", str),
              ("source_end_line", str), ("source_column", str), ("source_end_column", str),
              ("profile_type", lambda v: "{" + ",".join(str(int(p)) for p in v) + "}"),
              ("deduplicated_name", quote_text), ("scheduling_name", quote_text), ("stack_frame_id", str))


def backend_config_text(i, payloads, where: str = "") -> str | None:
    """An instruction's backend_config (or the module's payload it names) as the IR keeps it: raw
    when it lexes as a JSON dict that reads back as the same string, else quoted; None when empty."""
    config = i.backend_config
    if not config and i.HasField("backend_config_payload"):
        config = payload_bytes(i.backend_config_payload, payloads, where) or b""
    if not config:
        return None
    try:
        cfg = config.decode("utf-8")
    except UnicodeDecodeError:
        cfg = config.decode("latin-1")
    return cfg if raw_json_ok(cfg, "backend_config") else quote_text(cfg)


def metadata_text(md, payloads=()) -> str | None:
    if not (md.op_type or md.op_name or md.source_file or md.scheduling_name or md.stack_frame_id):
        return None
    present = {f.name: v for f, v in md.ListFields()}     # the fields set (not 0, not empty)
    r = [f"{name}={show(present[name])}" for name, show in _MD_FIELDS if name in present]
    if "metadata_payload" in present:
        data = payload_bytes(md.metadata_payload, payloads)
        if data:
            r.append("metadata_payload=" + quote_text(data.decode("utf-8", "surrogateescape")))
    return "{" + " ".join(r) + "}"


SHARDING_TYPES = {0: "replicated", 1: "maximal", 2: "tuple", 3: "other", 4: "manual", 5: "unknown",
                   6: "unreduced"}


def sharding_text(sp, where: str, top: bool = True) -> str:
    t = sp.type
    if t == 2:
        return "{" + ", ".join(sharding_text(e, where, False) for e in sp.tuple_shardings) + "}"
    if sp.HasField("named_sharding"):
        return named_sharding_text(sp.named_sharding, where)
    parts = []
    if t == 0:
        parts.append("replicated")
    elif t == 1:
        dev = sp.tile_assignment_devices[0] if len(sp.tile_assignment_devices) else 0
        parts.append(f"maximal device={dev}")
    elif t in (4, 5, 6):
        parts.append(SHARDING_TYPES[t])
    elif t == 3:
        dims = list(sp.tile_assignment_dimensions)
        ta = "devices=[" + ",".join(map(str, dims)) + "]"
        if len(sp.iota_reshape_dims):
            ta += "<=[" + ",".join(map(str, sp.iota_reshape_dims)) + "]"
            perm = list(sp.iota_transpose_perm)
            if perm and perm != sorted(perm):
                ta += "T(" + ",".join(map(str, perm)) + ")"
        else:
            ta += ",".join(map(str, sp.tile_assignment_devices))
        parts.append(ta)
        if sp.replicate_on_last_tile_dim:
            parts.append("last_tile_dim_replicate")
        if len(sp.last_tile_dims):
            names = []
            for d in sp.last_tile_dims:
                if d not in SHARDING_TYPES:
                    raise ProtoError(f"{where}sharding subgroup type {d} unknown")
                names.append(SHARDING_TYPES[d])
            parts.append("last_tile_dims={" + ", ".join(names) + "}")
    else:
        raise ProtoError(f"{where}sharding type {t} is not one this schema knows")
    if sp.is_shard_group:
        parts.append(("shard_as " if sp.shard_group_type == 0 else "shard_like ") + str(sp.shard_group_id))
    mds = [metadata_text(md) or "{}" for md in sp.metadata]
    if len(mds) == 1:
        parts.append("metadata=" + mds[0])
    elif mds:
        parts.append("metadata={" + ", ".join(mds) + "}")
    return "{" + " ".join(parts) + "}"


def named_kind(ns) -> str | None:
    """The word a named sharding without dimension shardings prints: `manual` (`unreduced`) for a mesh
    all manual (unreduced), None for a maximal mesh, else `replicated`."""
    mp = ns.mesh
    n_axes = len(mp.axes)
    for kind, axes in (("unreduced", ns.unreduced_axes), ("manual", ns.manual_axes)):
        if n_axes and len(axes) == n_axes and sorted(a.mesh_axis_index for a in axes) == list(range(n_axes)):
            return kind
    return None if not n_axes and len(mp.device_ids) == 1 else "replicated"


def named_sharding_text(ns, where: str) -> str:
    """A NamedShardingProto as XLA prints it: {MESH, [dims], replicated={..}, unreduced={..},
    manual={..}, metadata={{..}, ..}}; without dimension shardings a mesh all manual (unreduced)
    prints `manual` (`unreduced`), a maximal mesh nothing, any other `replicated`."""
    mp = ns.mesh
    parts = [mesh_text(mp, where)]
    kinds = (("replicated", ns.replicated_axes), ("unreduced", ns.unreduced_axes), ("manual", ns.manual_axes))

    def refs(axes):
        return ", ".join(axis_ref(a, mp, where) for a in axes)
    if len(ns.dim_shardings):
        dims = []
        for d in ns.dim_shardings:
            words = [axis_ref(a, mp, where) for a in d.axes]
            if not d.is_closed:
                words.append("?")
            dims.append("{" + ", ".join(words) + "}")
        parts.append("[" + ", ".join(dims) + "]")
        parts += [f"{k}={{{refs(axes)}}}" for k, axes in kinds if len(axes)]
    else:
        kind = named_kind(ns)
        if kind is not None:
            parts.append(kind)
        if kind == "replicated":
            parts += [f"{k}={{{refs(axes)}}}" for k, axes in kinds if len(axes)]
    mds = [metadata_text(md) or "{}" for md in ns.metadata]
    if mds:
        parts.append("metadata={" + ", ".join(mds) + "}")
    return "{" + ", ".join(parts) + "}"


def conv_labels(c) -> str:
    def side(batch, feature, spatial, bl, fl):
        rank = max([2 + len(spatial), batch + 1, feature + 1] + [d + 1 for d in spatial])
        chars = ["?"] * rank
        for pos, ch in ((batch, bl), (feature, fl)):
            if 0 <= pos < rank:
                chars[pos] = ch
        for k, s in enumerate(spatial):
            if 0 <= s < rank:
                chars[s] = str(k) if k < 10 else f"[{k}]"
        return "".join(chars)
    lhs = side(c.input_batch_dimension, c.input_feature_dimension, list(c.input_spatial_dimensions), "b", "f")
    rhs = side(c.kernel_input_feature_dimension, c.kernel_output_feature_dimension,
               list(c.kernel_spatial_dimensions), "i", "o")
    out = side(c.output_batch_dimension, c.output_feature_dimension, list(c.output_spatial_dimensions), "b", "f")
    return f"{lhs}_{rhs}->{out}"


PRECISIONS = {0: "default", 1: "high", 2: "highest"}


DOT_ALGORITHMS = {1: "dot_any_f8_any_f8_f32", 2: "dot_any_f8_any_f8_f32_fast_accum", 3: "dot_f16_f16_f16",
               4: "dot_f16_f16_f32", 5: "dot_bf16_bf16_bf16", 6: "dot_bf16_bf16_f32", 7: "dot_bf16_bf16_f32_x3",
               8: "dot_bf16_bf16_f32_x6", 9: "dot_tf32_tf32_f32", 10: "dot_tf32_tf32_f32_x3",
               11: "dot_f32_f32_f32", 12: "dot_f64_f64_f64", 13: "dot_bf16_bf16_f32_x9"}


def mesh_text(mp, where: str = "") -> str:
    """XLA's Mesh::ToString."""
    axes = list(mp.axes)
    ids = list(mp.device_ids)
    if not axes and len(ids) == 1:
        return f"maximal_mesh[device_id={ids[0]}]"
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ProtoError(f"{where}the mesh names axis {shown_text(dup)} twice")
    text = "mesh[" + ",".join(f"{axis_name(a.name, where)}={a.size}" for a in axes) + "]"
    if mp.HasField("iota_transform"):
        io = mp.iota_transform
        if len(io.reshape_dims) > 1:
            text += ", device_ids=([" + ",".join(map(str, io.reshape_dims)) + "]"
            perm = list(io.transpose_perm)
            if perm:
                text += "T(" + ",".join(map(str, perm)) + ")"
            text += ")"
    elif ids and ids != list(range(len(ids))):
        text += ", device_ids=(" + ",".join(map(str, ids)) + ")"
    return text


def axis_ref(a, mp, where: str) -> str:
    if not 0 <= a.mesh_axis_index < len(mp.axes):
        raise ProtoError(f"{where}mesh axis index {a.mesh_axis_index} out of the mesh's {len(mp.axes)} axes")
    t = axis_name(mp.axes[a.mesh_axis_index].name, where)
    if a.HasField("sub_axis_info"):
        t += f":({a.sub_axis_info.pre_size}){a.sub_axis_info.size}"
    return t


def axis_name(name: str, where: str = "") -> str:
    """A mesh axis name in single quotes (the text has no escapes there)."""
    if "'" in name or "\n" in name or "\r" in name or not name.strip():
        raise ProtoError(f"{where}the mesh axis name {shown_text(name)} cannot be written as HLO text (written "
                         "in single quotes, without escapes)")
    return f"'{name}'"


def float32_text(x: float) -> str:
    f = np.float32(x)
    if math.isnan(f) or math.isinf(f):
        return str(float(f)).lower()
    s = "%.6g" % f
    if np.float32(float(s)) != f:
        s = "%.9g" % f
    return s


FLOAT_TYPES = {"f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e4m3fn", "f8e4m3b11fnuz", "f8e3m4",
           "f8e5m2fnuz", "f8e4m3fnuz", "f4e2m1fn", "f8e8m0fnu", "f6e2m3fn", "f6e3m2fn", "c64",
           "c128"}


_SIGNED = {"s1", "s2", "s4", "s8", "s16", "s32", "s64"}


def default_comparison_type(et: str) -> str:
    if et in FLOAT_TYPES:
        return "FLOAT"
    if et in _SIGNED:
        return "SIGNED"
    return "UNSIGNED"


def default_comparison_order(et: str) -> str:
    return "PARTIAL" if et in FLOAT_TYPES else "TOTAL"


RNG_ALGORITHMS = {0: "rng_default", 1: "rng_three_fry", 2: "rng_philox"}


DISTRIBUTIONS = {1: "rng_uniform", 2: "rng_normal"}


FFT_TYPES = {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}


TRANSPOSE_KINDS = {0: "TRANSPOSE_INVALID", 1: "NO_TRANSPOSE", 2: "TRANSPOSE", 3: "ADJOINT"}


SCHEDULES = {1: "SCHEDULE_LATEST", 2: "SCHEDULE_EARLIEST"}


API_VERSIONS = {0: "API_VERSION_UNSPECIFIED", 2: "API_VERSION_STATUS_RETURNING",
        3: "API_VERSION_STATUS_RETURNING_UNIFIED", 4: "API_VERSION_TYPED_FFI"}


PADDING_TYPES = {1: "PADDING_VALID", 2: "PADDING_SAME"}


CONV_KINDS = {1: "fprop", 2: "dgrad", 3: "wgrad"}


def _taking(attr: str) -> frozenset[str]:
    """The opcodes whose row in the opcode table takes attribute ATTR."""
    return frozenset(op for op, spec in OPCODES.items() if attr in spec.attrs)


REPLICA_GROUP_OPS = _taking("replica_groups")      # channel_id, replica_groups, ... in XLA's order


CHANNEL_ONLY_OPS = _taking("is_host_transfer")      # send, recv and their -done


DIMENSIONS_OPS = _taking("dimensions")


TO_APPLY = _taking("to_apply") - {"custom-call"}   # (XLA prints a custom call's called_computations)


# gather's and scatter's dimension numbers: the fields always printed, then the batching ones
# printed when set, then index_vector_dim
GATHER_DIMS = (("offset_dims", "collapsed_slice_dims", "start_index_map"),
                ("operand_batching_dims", "start_indices_batching_dims"))


SCATTER_DIMS = (("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims"),
                 ("input_batching_dims", "scatter_indices_batching_dims"))


def check_enum_word(op: str, attr: str, field: str, word: str, where: str) -> None:
    """A string field written as an enum attribute (a fusion's kind, a compare's direction and
    type): ProtoError unless it is one of the spellings OPCODES gives (an unset type is left out)."""
    spec = OPCODES[op].attrs.get(attr, "") if op in OPCODES else ""
    if not spec.startswith("enum:"):
        return
    if not word and attr == "type":
        return
    if word not in spec[len("enum:"):].split("|"):
        raise ProtoError(f"{where}{field} {shown_text(word)} is not one of {spec[len('enum:'):].replace('|', ', ')}")


def enum_name(table: dict, value: int, what: str, where: str) -> str:
    """An enum value's HLO spelling; ProtoError for a number this schema does not know."""
    name = table.get(value)
    if name is None:
        raise ProtoError(f"{where}{what} {value} is not one this schema knows (a newer XLA?)")
    return name


def number_text(x: float) -> str:
    t = repr(float(x))
    return t[:-2] if t.endswith(".0") else t


def same_program(a, b) -> bool:
    """Two ProgramShapeProtos for the same parameters and result (element types and dimensions;
    layouts aside)."""
    def key(sp):
        return (sp.element_type, tuple(sp.dimensions), tuple(key(t) for t in sp.tuple_shapes))
    return len(a.parameters) == len(b.parameters) and all(key(x) == key(y) for x, y in zip(a.parameters, b.parameters)) \
        and key(a.result) == key(b.result)


class ProtoIndex:
    """An HloModuleProto's ids: computations and instructions by id, the async computations XLA
    prints as one instruction (`sugared`: wrapped computation id -> its root), XLA's print order."""
    def __init__(self, module, limits=None):
        self.m = module
        self.limits = limits
        self.config = None            # an HloModuleConfigProto for the header
        self.comp_names: dict[int, str] = {}
        for c in module.computations:
            self.comp_names[c.id] = c.name
        self.inst_by_id: dict[int, object] = {}
        for c in module.computations:
            for i in c.instructions:
                self.inst_by_id[i.id] = i
        self.inst_names = {k: i.name for k, i in self.inst_by_id.items()}
        # async computations XLA prints as one instruction (`custom-call-start(...)`): their id ->
        # the wrapped root instruction
        by_id = {c.id: c for c in module.computations}
        self.sugared: dict[int, object] = {}
        for c in module.computations:
            for i in c.instructions:
                if i.opcode in ("async-start", "async-update", "async-done") and len(i.called_computation_ids):
                    w = by_id.get(i.called_computation_ids[0])
                    if w is None:
                        continue
                    roots = [x for x in w.instructions if x.id == w.root_id]
                    if roots and all(x.opcode == "parameter" or x.id == w.root_id for x in w.instructions):
                        self.sugared[w.id] = roots[0]


    def scheduled(self, c) -> tuple[list, dict, int]:
        """(a computation's instructions in the module's schedule when it has one for them all, else
        in the proto's order; its instructions by id; its root's id).  ProtoError for a computation
        that cannot be written as text (a name text cannot hold, no instructions)."""
        where = f"computation {name_label(c.name)}: "
        if not NAME_RE.fullmatch(c.name):
            raise ProtoError(f"{where}the name {shown_text(c.name)} cannot be written as HLO text")
        insts = list(c.instructions)
        if not insts:
            raise ProtoError(f"{where}no instructions")
        ids = {i.id: i for i in insts}
        seq = self.m.schedule.sequences.get(c.id) if self.m.HasField("schedule") else None
        if seq is not None and len(seq.instruction_ids) == len(insts) and all(k in ids for k in seq.instruction_ids):
            insts = [ids[k] for k in seq.instruction_ids]
        return insts, ids, (c.root_id if c.root_id in ids else insts[-1].id)

    def sugar_of(self, i):
        """The instruction an async-start/update/done wraps when XLA prints it as `<op>-start` (its
        computation holds only parameters and it), else None."""
        if i.opcode not in ("async-start", "async-update", "async-done"):
            return None
        w = self.wrapped_id(i)
        return self.sugared.get(w) if w is not None else None

    def comp(self, cid: int, where: str) -> str:
        name = self.comp_names.get(cid)
        if name is None:
            raise ProtoError(f"{where}calls computation id {cid}, which the module does not hold")
        return "%" + name


    def print_order(self) -> list:
        """The computations in the order XLA prints them (HloModule::MakeComputationPostOrder with
        dfs_postorder): each computation nobody calls, after the computations it embeds."""
        # HloModule::CreateFromProto keeps the computations in the order of their ids
        comps = sorted(self.m.computations, key=lambda c: c.id)
        by_id = {c.id: c for c in comps}
        nonroot = {k for c in comps for i in c.instructions for k in i.called_computation_ids}
        out, added = [], set()
        for c in comps:
            if c.id in nonroot:
                continue
            for e in self._embedded(c, by_id):
                if e.id not in added:
                    added.add(e.id)
                    out.append(e)
            if c.id not in added:
                added.add(c.id)
                out.append(c)
        if len(out) != len(comps):
            return list(self.m.computations)    # a call cycle: keep the proto's order
        return [c for c in out if c.id not in self.sugared]


    @staticmethod
    def _embedded(comp, by_id) -> list:
        visited, post, stack = set(), [], []

        def push(ids):
            for k in reversed(list(ids)):
                c = by_id.get(k)
                if c is not None and k not in visited:
                    visited.add(k)
                    stack.append([c, 0, sorted(c.instructions, key=lambda i: i.id)])

        for inst in sorted(comp.instructions, key=lambda i: i.id):
            push(inst.called_computation_ids)
            while stack:
                cur = stack[-1]
                c, pos, insts = cur
                if pos == len(insts):
                    stack.pop()
                    post.append(c)
                else:
                    cur[1] += 1
                    push(insts[pos].called_computation_ids)
        return post


    def entry_name(self) -> str:
        m = self.m
        names = {c.name for c in m.computations}
        if m.entry_computation_name:
            if m.entry_computation_name not in names:
                raise ProtoError(f"the entry computation {shown_text(m.entry_computation_name)} is not in the module")
            return m.entry_computation_name
        if m.entry_computation_id in self.comp_names:
            return self.comp_names[m.entry_computation_id]
        return m.computations[-1].name


    def inst_name(self, iid: int, where: str) -> str:
        return "%" + self.name_of(iid, where)

    def name_of(self, iid: int, where: str) -> str:
        """The name of instruction IID (without '%')."""
        name = self.inst_names.get(iid)
        if name is None:
            raise ProtoError(f"{where}refers to instruction id {iid}, which the module does not hold")
        return name


    def wrapped_id(self, i):
        """The id of the computation an async instruction wraps (update and done: their start's)."""
        seen = 0
        while i is not None and seen < 1000:
            if len(i.called_computation_ids):
                return i.called_computation_ids[0]
            if i.opcode not in ("async-update", "async-done") or not len(i.operand_ids):
                return None
            i = self.inst_by_id.get(i.operand_ids[0])
            seen += 1
        return None


    def operand_rank(self, i, k: int) -> int | None:
        if k < len(i.operand_ids):
            o = self.inst_by_id.get(i.operand_ids[k])
            if o is not None:
                sp = o.shape
                while sp.element_type == 13 and len(sp.tuple_shapes):
                    sp = sp.tuple_shapes[0]
                return len(sp.dimensions)
        return None


    def operand_type(self, i, k: int) -> str | None:
        if k < len(i.operand_ids):
            o = self.inst_by_id.get(i.operand_ids[k])
            if o is not None:
                return PRIMITIVE_TYPES.get(o.shape.element_type)
        return None



# the opcodes that share one handler of XLA's PrintExtraAttributesImpl (any other handler serves the
# opcode its name spells, '_' for '-')
SHARED_HANDLERS = {"batch_norm": ("batch-norm-training", "batch-norm-inference", "batch-norm-grad"),
                   "channel_only": CHANNEL_ONLY_OPS, "replica_groups": REPLICA_GROUP_OPS,
                   "collective_permute": ("collective-permute", "collective-permute-start"),
                   "reduce_window": ("reduce-window", "select-and-scatter"), "dot": ("dot", "scaled-dot"),
                   "get_dimension_size": ("get-dimension-size", "set-dimension-size")}


def handler_table(handlers: dict, dimensions) -> dict:
    """opcode -> its attribute handler, from HANDLERS (name -> function, named as SHARED_HANDLERS or
    after the opcode); DIMENSIONS serves the opcodes that take `dimensions` and have none of their own."""
    table: dict = {}
    for name, f in handlers.items():
        for op in SHARED_HANDLERS.get(name, (name.replace("_", "-"),)):
            assert op in OPCODES and op not in table, op
            table[op] = f
    for op in DIMENSIONS_OPS:
        table.setdefault(op, dimensions)
    return table
