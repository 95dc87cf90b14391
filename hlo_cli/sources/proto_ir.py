"""An HloModuleProto decoded straight into the IR (no HLO text printed and parsed again).

Each field becomes the IR's typed value: shapes through proto_shape, literals through
proto_literal, attributes either built as the IR's typed values (Window, SliceSpec, Sharding...)
or as the generic values the parser's builder feeds the IR's decoders (``Word``, ``IntList``,
``Group``, ``Quoted``) and decoded by ``ir.attributes.decoder(kind)``.  Which attributes a module
holds (what XLA leaves out: a sort's is_stable=false, a compare's default comparison type...)
follows XLA's printer, PrintExtraAttributesImpl, opcode by opcode; proto_fields.py's ``ProtoIndex``
gives the module's ids, the order XLA prints computations in and the async sugar.

The module's text, where one is needed (``hlo fmt``, source lines of diagnostics, the cache key),
is the IR's own printer's (``ir.printer.format_module``); every instruction's and computation's
location is that of its line in that text.

What the proto cannot express, or what the IR refuses (an attribute its opcode does not take, a
value the IR's decoder rejects), raises ProtoError naming the computation and instruction.
"""
from __future__ import annotations

from ..ir.dtypes import ELEMENT_TYPES
from ..ir.attributes import (COMPARISON_ORDERS, KV, AliasEntry, AttrError, BackendConfig, BufferDonors,
                             ComputationLayout, FrontendAttributes, Group, InputOutputAlias, IntList,
                             IotaReplicaGroups, Metadata, OutputOperandAliasing, PaddingConfig, PaddingDim, Quoted,
                             RawValue, Sep, Seq, Sharding, SliceDim, SliceSpec, Window, WindowDim, Word, decoder)
from ..ir.module import Computation, FileLocation, Instruction, Loc, Module, StackFrame, StackFrames
from ..ir.opcodes import COMMON_ATTRS, OPCODES
from .proto_literal import literal_ir
from .proto_shape import ProtoError, shape_of
from .proto_fields import (
    API_VERSIONS, backend_config_text, handler_table, CONV_KINDS, DISTRIBUTIONS, DOT_ALGORITHMS, FFT_TYPES,
    GATHER_DIMS, NAME_RE, PADDING_TYPES, PRECISIONS, RNG_ALGORITHMS, SCATTER_DIMS,
    SCHEDULES, SHARDING_TYPES, TO_APPLY, TRANSPOSE_KINDS, ProtoIndex, axis_name, axis_ref, bare_word,
    check_enum_word, conv_labels, default_comparison_order, default_comparison_type, enum_name,
    float32_text, metadata_text, name_label, named_kind, named_sharding_text, number_text, oneline_literal,
    quote_text, same_program, sharding_text, shown_text)


def _w(x) -> Word:
    return Word(str(x))


def _ints(xs) -> IntList:
    return IntList(int(x) for x in xs)


def _group(items, open_: str = "{") -> Group:
    out: list = []
    for k, it in enumerate(items):
        if k:
            out.append(Sep(","))
        out.append(it)
    return Group(open_, tuple(out))


class _Attrs:
    """An instruction's attributes in the order XLA prints them: name -> (kind, value)."""

    def __init__(self, opcode: str):
        spec = OPCODES.get(opcode)
        self.opcode = opcode
        self.kinds = spec.attrs if spec is not None else {}     # read only
        self.items: list[tuple[str, object, bool]] = []

    def put(self, name: str, generic) -> None:
        self.items.append((name, generic, False))

    def typed(self, name: str, value) -> None:
        self.items.append((name, value, True))

    def decoded(self, where: str) -> dict:
        out: dict = {}
        for name, v, typed in self.items:
            if typed:
                out[name] = v
                continue
            kind = self.kinds.get(name) or COMMON_ATTRS.get(name)
            if kind is None:
                known = sorted(set(self.kinds) | set(COMMON_ATTRS))
                raise ProtoError(f"{where}unexpected attribute '{name}' for {self.opcode} (it takes: "
                                 f"{', '.join(known)})")
            try:
                out[name] = decoder(kind)(v)
            except AttrError as e:
                raise ProtoError(f"{where}attribute {name}: {e}") from None
        return out


def _window(w) -> Window:
    return Window(tuple(WindowDim(int(d.size), int(d.stride), int(d.padding_low), int(d.padding_high),
                                  int(d.window_dilation), int(d.base_dilation), bool(d.window_reversal))
                        for d in w.dimensions))


def _aliasing(entries) -> OutputOperandAliasing:
    return OutputOperandAliasing(tuple(AliasEntry(tuple(e.output_shape_index), int(e.operand_index),
                                                  tuple(e.operand_shape_index)) for e in entries))


def _precision(pc, a: _Attrs, where: str):
    ps = list(pc.operand_precision)
    if any(p != 0 for p in ps):
        a.put("operand_precision", _group([_w(enum_name(PRECISIONS, p, "operand precision", where)) for p in ps]))
    if pc.algorithm:
        a.put("algorithm", _w(enum_name(DOT_ALGORITHMS, pc.algorithm, "dot algorithm", where)))


def _sparsity(i, a: _Attrs, where: str):
    sc = i.sparsity_config
    parts = []
    for side in ("lhs", "rhs"):
        if sc.HasField(side):
            t = getattr(sc, side)
            parts.append(KV(side, Group("{", (KV("sparsity", Word(f"{t.num_non_zero}x{t.block_size}")),
                                              KV("dimension", _w(t.dimension)), KV("stride", _w(t.stride))))))
    if parts:
        a.put("sparsity_config", Group("{", tuple(parts)))


def _dot_dnums(d, a: _Attrs):
    if len(d.lhs_batch_dimensions):
        a.put("lhs_batch_dims", _ints(d.lhs_batch_dimensions))
    a.put("lhs_contracting_dims", _ints(d.lhs_contracting_dimensions))
    if len(d.rhs_batch_dimensions):
        a.put("rhs_batch_dims", _ints(d.rhs_batch_dimensions))
    a.put("rhs_contracting_dims", _ints(d.rhs_contracting_dimensions))


def _replica_groups(ip, where: str):
    if ip.HasField("iota_collective_device_list"):
        il = ip.iota_collective_device_list
        perm = tuple(il.iota_transpose_perm)
        if perm == tuple(sorted(perm)):
            perm = ()
        return IotaReplicaGroups((int(il.num_replica_groups), int(il.num_devices_per_group)),
                                 tuple(il.iota_reshape_dims), perm)
    if ip.HasField("mesh_axes_replica_group_list"):
        return decoder("replica_groups")(_mesh_groups(ip.mesh_axes_replica_group_list, where))
    groups = ip.collective_device_list.replica_groups if ip.HasField("collective_device_list") else ip.replica_groups
    return decoder("replica_groups")(_group([_ints(g.replica_ids) for g in groups]) if len(groups) else IntList())


def _mesh_groups(ml, where: str) -> Seq:
    """The generic value `mesh['x'=2,'y'=4], device_ids=(...) {'y':(2)2,'x'}` reads as (the parser's
    builder joins the device_ids to the mesh, without the comma)."""
    mesh = [x for x in _mesh_generic(ml.mesh, where) if not isinstance(x, Sep)]
    return Seq((*mesh, _braced(_axis_refs(ml.axes, ml.mesh, where))))


def _sharding(sp, where: str) -> Sharding:
    return decoder("sharding")(_sharding_generic(sp, where))


def _md_list(mds: list[str]) -> Word:
    """A list of metadata as the sharding decoder reads it (generic_text of `{{..},{..}}`)."""
    return Word("{" + ",".join(mds) + "}")


def _sharding_generic(sp, where: str):
    """The generic value of a sharding's text (XLA's HloSharding::ToString)."""
    t = sp.type
    if t == 2:
        elements = [_sharding_generic(e, where) for e in sp.tuple_shardings]
        return _group(elements) if elements else IntList()
    if sp.HasField("named_sharding"):
        return _named_generic(sp.named_sharding, where)
    items: list = []
    if t == 0:
        items.append(Word("replicated"))
    elif t == 1:
        dev = sp.tile_assignment_devices[0] if len(sp.tile_assignment_devices) else 0
        items += [Word("maximal"), KV("device", _w(dev))]
    elif t in (4, 5, 6):
        items.append(Word(SHARDING_TYPES[t]))
    elif t == 3:
        items.append(KV("devices", _group([_w(d) for d in sp.tile_assignment_dimensions], "[")))
        if len(sp.iota_reshape_dims):
            items += [Sep("<="), _group([_w(d) for d in sp.iota_reshape_dims], "[")]
            perm = list(sp.iota_transpose_perm)
            if perm and perm != sorted(perm):
                items += [Word("T"), _group([_w(d) for d in perm], "(")]
        else:
            items += _sep_words(sp.tile_assignment_devices)
        if sp.replicate_on_last_tile_dim:
            items.append(Word("last_tile_dim_replicate"))
        if len(sp.last_tile_dims):
            names = []
            for d in sp.last_tile_dims:
                if d not in SHARDING_TYPES:
                    raise ProtoError(f"{where}sharding subgroup type {d} unknown")
                names.append(Word(SHARDING_TYPES[d]))
            items.append(KV("last_tile_dims", _group(names)))
    else:
        raise ProtoError(f"{where}sharding type {t} is not one this schema knows")
    if sp.is_shard_group:
        items += [Word("shard_as" if sp.shard_group_type == 0 else "shard_like"), _w(sp.shard_group_id)]
    mds = [metadata_text(md) or "{}" for md in sp.metadata]
    if len(mds) == 1:
        items.append(KV("metadata", Word(mds[0])))
    elif mds:
        items.append(KV("metadata", _md_list(mds)))
    return Group("{", tuple(items), sharding_text(sp, where))


def _sep_words(xs) -> list:
    out: list = []
    for k, x in enumerate(xs):
        if k:
            out.append(Sep(","))
        out.append(_w(int(x)))
    return out


def _mesh_generic(mp, where: str) -> list:
    """XLA's Mesh::ToString as generic values: `mesh['x'=2,'y'=4]`, `device_ids=(...)` after a comma."""
    axes = list(mp.axes)
    ids = list(mp.device_ids)
    if not axes and len(ids) == 1:
        return [Word("maximal_mesh"), Group("[", (KV("device_id", _w(ids[0])),))]
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ProtoError(f"{where}the mesh names axis {shown_text(dup)} twice")
    items: list = [Word("mesh"), _group([KV(axis_name(a.name, where), _w(a.size)) for a in axes], "[")]
    device_ids = None
    if mp.HasField("iota_transform"):
        io = mp.iota_transform
        if len(io.reshape_dims) > 1:
            inner: list = [_group([_w(int(d)) for d in io.reshape_dims], "[")]
            if len(io.transpose_perm):
                inner += [Sep("T"), _group([_w(int(d)) for d in io.transpose_perm], "(")]
            device_ids = Group("(", tuple(inner))
    elif ids and ids != list(range(len(ids))):
        device_ids = _group([_w(int(d)) for d in ids], "(")
    if device_ids is not None:
        items += [Sep(","), KV("device_ids", device_ids)]
    return items


def _axis_refs(axes, mp, where: str, open_: bool = False) -> list:
    """`'x', 'y':(2)2` (and `?` for an open dimension) as generic values."""
    refs: list = []
    for a in axes:
        if refs:
            refs.append(Sep(","))
        refs.append(Word(axis_ref(a, mp, where).split(":")[0]))
        if a.HasField("sub_axis_info"):
            refs += [Sep(":"), Group("(", (_w(a.sub_axis_info.pre_size),)), _w(a.sub_axis_info.size)]
    if open_:
        if refs:
            refs.append(Sep(","))
        refs.append(Word("?"))
    return refs


def _braced(refs: list):
    return Group("{", tuple(refs)) if refs else IntList()


def _named_generic(ns, where: str) -> Group:
    """A NamedShardingProto's text as generic values (XLA's HloSharding::ToString of a named sharding)."""
    mp = ns.mesh
    parts: list = [_mesh_generic(mp, where)]
    kinds = (("replicated", ns.replicated_axes), ("unreduced", ns.unreduced_axes), ("manual", ns.manual_axes))
    if len(ns.dim_shardings):
        dims = [_braced(_axis_refs(d.axes, mp, where, not d.is_closed)) for d in ns.dim_shardings]
        parts.append([_group(dims, "[")])
        parts += [[KV(k, _braced(_axis_refs(axes, mp, where)))] for k, axes in kinds if len(axes)]
    else:
        kind = named_kind(ns)
        if kind is not None:
            parts.append([Word(kind)])
        if kind == "replicated":
            parts += [[KV(k, _braced(_axis_refs(axes, mp, where)))] for k, axes in kinds if len(axes)]
    mds = [metadata_text(md) or "{}" for md in ns.metadata]
    if mds:
        parts.append([KV("metadata", _md_list(mds))])
    items: list = []
    for k, part in enumerate(parts):
        if k:
            items.append(Sep(","))
        items += part
    return Group("{", tuple(items), named_sharding_text(ns, where))


# ----------------------------------------------------------------------------- per-opcode attributes
# XLA's PrintExtraAttributesImpl, opcode by opcode: each function puts the attributes XLA prints for
# its opcodes (r: the module's ProtoIndex index, i: the instruction proto, a: the attributes)

def _x_batch_norm(r, i, op, a, where):
    a.put("epsilon", _w(float32_text(i.epsilon)))
    a.put("feature_index", _w(i.feature_index))


def _x_fft(r, i, op, a, where):
    a.put("fft_type", _w(enum_name(FFT_TYPES, i.fft_type, "fft_type", where)))
    a.put("fft_length", _ints(i.fft_length))


def _x_compare(r, i, op, a, where):
    check_enum_word(op, "direction", "comparison_direction", i.comparison_direction, where)
    check_enum_word(op, "type", "comparison_type", i.comparison_type, where)
    a.put("direction", _w(i.comparison_direction))
    et = r.operand_type(i, 0)
    if i.comparison_type and not i.comparison_order and (et is None or i.comparison_type != default_comparison_type(et)):
        a.put("type", _w(i.comparison_type))
    if i.comparison_order:
        if i.comparison_order not in COMPARISON_ORDERS:
            raise ProtoError(f"{where}comparison order {i.comparison_order!r} unknown")
        if et is None or i.comparison_order != default_comparison_order(et):
            a.put("order", _w(i.comparison_order))


def _x_triangular_solve(r, i, op, a, where):
    o = i.triangular_solve_options
    for name in ("left_side", "lower", "unit_diagonal"):
        if getattr(o, name):
            a.put(name, _w("true"))
    if o.transpose_a:
        a.put("transpose_a", _w(enum_name(TRANSPOSE_KINDS, o.transpose_a, "transpose_a", where)))


def _x_cholesky(r, i, op, a, where):
    if i.cholesky_options.lower:
        a.put("lower", _w("true"))


def _x_channel_only(r, i, op, a, where):
    if i.channel_id:
        a.put("channel_id", _w(i.channel_id))
    if i.is_host_transfer:
        a.put("is_host_transfer", _w("true"))


def _first_dim(i) -> IntList:
    return IntList((int(i.dimensions[0]) if len(i.dimensions) else 0,))


def _x_replica_groups(r, i, op, a, where):
    if i.channel_id:
        a.put("channel_id", _w(i.channel_id))
    try:
        a.typed("replica_groups", _replica_groups(i, where))
    except AttrError as e:
        raise ProtoError(f"{where}attribute replica_groups: {e}") from None
    if i.constrain_layout:
        a.put("constrain_layout", _w("true"))
    if op in ("all-gather", "all-gather-start"):
        a.put("dimensions", _first_dim(i))
        if i.use_global_device_ids:
            a.put("use_global_device_ids", _w("true"))
    elif op in ("all-reduce", "all-reduce-start", "reduce-scatter"):
        if i.use_global_device_ids:
            a.put("use_global_device_ids", _w("true"))
        if op == "reduce-scatter":
            a.put("dimensions", _first_dim(i))
    elif op == "all-to-all" and len(i.dimensions):
        a.put("dimensions", IntList((int(i.dimensions[0]),)))


def _x_collective_permute(r, i, op, a, where):
    if i.channel_id:
        a.put("channel_id", _w(i.channel_id))
    pairs = [IntList((int(p.source), int(p.target))) for p in i.source_target_pairs]
    a.put("source_target_pairs", _group(pairs) if pairs else IntList())
    sizes = list(i.dynamic_slice_sizes)
    if sizes:
        rank = r.operand_rank(i, 0) or len(sizes)
        a.put("slice_sizes", _group([_ints(sizes[k:k + rank]) for k in range(0, len(sizes), rank)]))


def _x_dimensions(r, i, op, a, where):
    a.put("dimensions", _ints(i.dimensions))
    if op == "sort" and i.is_stable:
        a.put("is_stable", _w("true"))


def _x_scan(r, i, op, a, where):
    a.put("dimensions", _ints(i.dimensions))
    a.put("num_carries", _w(i.num_carries))
    if i.is_reverse:
        a.put("is_reverse", _w("true"))
    if i.is_associative:
        a.put("is_associative", _w("true" if i.is_associative == 1 else "false"))


def _x_topk(r, i, op, a, where):
    a.put("k", _w(i.k))
    a.put("largest", _w("true" if i.largest else "false"))
    if i.is_stable:
        a.put("is_stable", _w("true"))


def _x_reshape(r, i, op, a, where):
    if len(i.dimensions) and i.dimensions[0] != -1:
        a.put("inferred_dimension", _w(i.dimensions[0]))


def _x_slice(r, i, op, a, where):
    a.typed("slice", SliceSpec(tuple(SliceDim(int(s.start), int(s.limit), int(s.stride))
                                     for s in i.slice_dimensions)))


def _x_fusion(r, i, op, a, where):
    check_enum_word(op, "kind", "fusion_kind", i.fusion_kind, where)
    a.put("kind", _w(i.fusion_kind))
    if len(i.output_operand_aliasing):
        a.typed("output_to_operand_aliasing", _aliasing(i.output_operand_aliasing))


def _x_rng(r, i, op, a, where):
    a.put("distribution", _w(enum_name(DISTRIBUTIONS, i.distribution, "distribution", where)))


def _x_get_tuple_element(r, i, op, a, where):
    a.put("index", _w(i.tuple_index))


def _x_reduce_precision(r, i, op, a, where):
    a.put("exponent_bits", _w(i.exponent_bits))
    a.put("mantissa_bits", _w(i.mantissa_bits))


def _x_infeed(r, i, op, a, where):
    if i.infeed_config:
        a.put("infeed_config", Quoted(i.infeed_config.decode("latin-1")))


def _x_outfeed(r, i, op, a, where):
    a.typed("outfeed_shape", shape_of(i.outfeed_shape, where))
    if i.outfeed_config:
        a.put("outfeed_config", Quoted(i.outfeed_config.decode("latin-1")))


def _conv_common(i, a, where):
    if i.feature_group_count not in (0, 1):
        a.put("feature_group_count", _w(i.feature_group_count))
    if i.batch_group_count not in (0, 1):
        a.put("batch_group_count", _w(i.batch_group_count))


def _x_convolution(r, i, op, a, where):
    if len(i.window.dimensions):
        a.typed("window", _window(i.window))
    a.put("dim_labels", _w(conv_labels(i.convolution_dimension_numbers)))
    _conv_common(i, a, where)
    if i.conv_kind:
        a.put("convolution_kind", _w(enum_name(CONV_KINDS, i.conv_kind, "conv_kind", where)))
    _precision(i.precision_config, a, where)
    _sparsity(i, a, where)
    if i.convolution_field_101:
        raise ProtoError(f"{where}field 101 of xla.HloInstructionProto (a newer XLA's "
                         "convolution setting) is set; hlo does not know what it means, so "
                         "the convolution is not read")


def _x_reduce_window(r, i, op, a, where):
    if len(i.window.dimensions):
        a.typed("window", _window(i.window))


def _x_custom_call(r, i, op, a, where):
    if i.HasField("window"):
        a.typed("window", _window(i.window))
    if i.HasField("convolution_dimension_numbers"):
        a.put("dim_labels", _w(conv_labels(i.convolution_dimension_numbers)))
    _conv_common(i, a, where)
    _precision(i.precision_config, a, where)
    if i.padding_type:
        a.put("padding_type", _w(enum_name(PADDING_TYPES, i.padding_type, "padding_type", where)))
    a.put("custom_call_target", Quoted(i.custom_call_target))
    if i.constrain_layout:
        a.put("operand_layout_constraints", _group([shape_of(s, where) for s in i.operand_shapes_with_layout])
              if len(i.operand_shapes_with_layout) else IntList())
    if i.custom_call_has_side_effect:
        a.put("custom_call_has_side_effect", _w("true"))
    if i.HasField("literal"):
        lit = literal_ir(i.literal, shape_of(i.literal.shape, where), where, r.limits)
        a.typed("literal", RawValue(oneline_literal(lit) if not lit.shape.is_tuple else _tuple_literal_raw(lit)))
    if len(i.output_operand_aliasing):
        a.typed("output_to_operand_aliasing", _aliasing(i.output_operand_aliasing))
    if i.custom_call_schedule:
        a.put("schedule", _w(enum_name(SCHEDULES, i.custom_call_schedule, "custom_call_schedule", where)))
    if i.custom_call_api_version != 1:
        a.put("api_version", _w(enum_name(API_VERSIONS, i.custom_call_api_version, "custom_call_api_version", where)))


def _tuple_literal_raw(lit) -> str:
    """A tuple literal of a custom call as the IR keeps it: the generic text of XLA's one-line form
    (elements `shape value` without the blanks after commas)."""
    if lit.shape.is_tuple:
        return "(" + ",".join(_tuple_literal_raw(e) for e in lit.value) + ")"
    return oneline_literal(lit).replace(", ", ",").replace("{ ", "{").replace(" }", "}").replace("( ", "(") \
        .replace(" )", ")")


def _x_pad(r, i, op, a, where):
    a.typed("padding", PaddingConfig(tuple(PaddingDim(int(d.edge_padding_low), int(d.edge_padding_high),
                                                      int(d.interior_padding)) for d in i.padding_config.dimensions)))


def _x_dynamic_slice(r, i, op, a, where):
    a.put("dynamic_slice_sizes", _ints(i.dynamic_slice_sizes))


def _index_dnums(d, fields, a):
    always, when_set = fields
    for f in always:
        a.put(f, _ints(getattr(d, f)))
    for f in when_set:
        if len(getattr(d, f)):
            a.put(f, _ints(getattr(d, f)))
    a.put("index_vector_dim", _w(d.index_vector_dim))


def _x_gather(r, i, op, a, where):
    _index_dnums(i.gather_dimension_numbers, GATHER_DIMS, a)
    a.put("slice_sizes", _ints(i.gather_slice_sizes))
    if i.indices_are_sorted:
        a.put("indices_are_sorted", _w("true"))


def _x_scatter(r, i, op, a, where):
    _index_dnums(i.scatter_dimension_numbers, SCATTER_DIMS, a)
    if i.indices_are_sorted:
        a.put("indices_are_sorted", _w("true"))
    if i.unique_indices:
        a.put("unique_indices", _w("true"))


def _x_iota(r, i, op, a, where):
    a.put("iota_dimension", _w(i.dimensions[0] if len(i.dimensions) else 0))


def _x_dot(r, i, op, a, where):
    _dot_dnums(i.dot_dimension_numbers, a)
    _precision(i.precision_config, a, where)
    _sparsity(i, a, where)


def _x_ragged_dot(r, i, op, a, where):
    rd = i.ragged_dot_dimension_numbers
    _dot_dnums(rd.dot_dimension_numbers, a)
    if len(rd.lhs_ragged_dimensions):
        a.put("lhs_ragged_dims", _ints(rd.lhs_ragged_dimensions))
    if len(rd.rhs_group_dimensions):
        a.put("rhs_group_dims", _ints(rd.rhs_group_dimensions))
    _precision(i.precision_config, a, where)


def _x_domain(r, i, op, a, where):
    if i.HasField("domain_entry_sharding") and i.HasField("domain_exit_sharding"):
        # XLA prints the exit sharding as entry= and the entry sharding as exit=
        a.put("domain", _group([KV("kind", Quoted("sharding")),
                                KV("entry", _sharding_generic(i.domain_exit_sharding, where)),
                                KV("exit", _sharding_generic(i.domain_entry_sharding, where))]))


def _x_get_dimension_size(r, i, op, a, where):
    a.put("dimensions", _first_dim(i))


def _x_rng_get_and_update_state(r, i, op, a, where):
    a.put("delta", _w(i.delta))


def _x_rng_bit_generator(r, i, op, a, where):
    a.put("algorithm", _w(enum_name(RNG_ALGORITHMS, i.rng_algorithm, "rng_algorithm", where)))


def _x_copy_start(r, i, op, a, where):
    if i.HasField("cross_program_prefetch_index"):
        a.put("cross_program_prefetch_index", _w(i.cross_program_prefetch_index))


def _x_async_start(r, i, op, a, where):
    if i.async_execution_thread and i.async_execution_thread != "main":
        a.put("async_execution_thread", Quoted(i.async_execution_thread))
    if len(i.output_operand_aliasing):
        a.typed("output_to_operand_aliasing", _aliasing(i.output_operand_aliasing))


_EXTRA = handler_table({name[3:]: f for name, f in list(globals().items())
                        if name.startswith("_x_") and name != "_x_dimensions"}, _x_dimensions)


def _calls(r, i, op, names: list, a: _Attrs, where: str):
    """The computations an instruction calls, under the attribute names XLA prints."""
    if not names:
        return
    refs = [_w("%" + n) for n in names]
    if op == "while":
        if len(refs) != 2:
            raise ProtoError(f"{where}a while calls 2 computations, got {len(refs)}")
        a.put("condition", refs[1])
        a.put("body", refs[0])
    elif op == "select-and-scatter":
        if len(refs) != 2:
            raise ProtoError(f"{where}a select-and-scatter calls 2 computations, got {len(refs)}")
        a.put("select", refs[0])
        a.put("scatter", refs[1])
    elif op == "conditional":
        if r.operand_type(i, 0) == "pred" and len(refs) == 2:
            a.put("true_computation", refs[0])
            a.put("false_computation", refs[1])
        else:
            a.put("branch_computations", _group(refs))
    elif op in TO_APPLY:
        a.put("to_apply", refs[0])
        if op == "call" and i.is_composite:
            a.put("is_composite", _w("true"))
    elif op == "custom-call":
        a.put("called_computations", _group(refs))
    elif op in ("async-start", "async-update", "async-done"):
        if op == "async-start":
            a.put("calls", refs[0])
    else:
        if len(refs) != 1:
            raise ProtoError(f"{where}{op} calls {len(refs)} computations (it calls one)")
        a.put("calls", refs[0])


# ----------------------------------------------------------------------------- instructions

def _common(r, i, a: _Attrs, where: str, frontend: bool = True):
    if i.HasField("sharding"):
        a.typed("sharding", _sharding(i.sharding, where))
    if frontend and len(i.frontend_attributes.map):
        a.typed("frontend_attributes", _frontend(i.frontend_attributes, where))
    if len(i.control_predecessor_ids):
        a.put("control-predecessors", _group([Word("%" + r.name_of(k, where)) for k in i.control_predecessor_ids]))
    sv = i.statistics_viz
    if len(sv.statistics):
        a.put("statistics", _group([KV("visualizing_index", _w(sv.stat_index_to_visualize))] +
                                   [KV(bare_word(st.stat_name, "statistic name", where), Word(number_text(st.stat_val)))
                                    for st in sv.statistics]))
    ra = i.result_accuracy
    if ra.mode != 0:
        a.put("result_accuracy", _group([KV("mode", Word(enum_name({1: "highest"}, ra.mode, "result accuracy mode",
                                                                   where)))]))
    elif ra.HasField("tolerance"):
        t = ra.tolerance
        a.put("result_accuracy", _group([KV("tolerance", _group([KV("atol", Word(number_text(t.atol))),
                                                                 KV("rtol", Word(number_text(t.rtol))),
                                                                 KV("ulps", _w(t.ulps))]))]))


def _frontend(fa, where: str) -> FrontendAttributes:
    return FrontendAttributes(tuple((bare_word(k, "frontend attribute key", where), v)
                                    for k, v in sorted(fa.map.items())))


def _extra_attributes(r, i, op: str, a: _Attrs, where: str, frontend: bool = True):
    f = _EXTRA.get(op)
    if f is not None:
        f(r, i, op, a, where)
    _calls(r, i, op, [r.comp(k, where)[1:] for k in i.called_computation_ids], a, where)
    _common(r, i, a, where, frontend)


def _head(r, i, where: str):
    """(opcode as the IR holds it, shape, operands, literal, parameter number, attributes)."""
    op = i.opcode
    if not op:
        raise ProtoError(f"{where}an instruction without an opcode")
    shape = shape_of(i.shape, where)
    operands = tuple(r.name_of(k, where) for k in i.operand_ids)
    for k in i.called_computation_ids:
        r.comp(k, where)
    literal = pnum = None
    a = _Attrs(op)
    if op == "parameter":
        operands = ()
        pnum = int(i.parameter_number)
        if len(i.parameter_replication.replicated_at_leaf_buffers):
            a.typed("parameter_replication", tuple(bool(b) for b in i.parameter_replication.replicated_at_leaf_buffers))
    elif op == "constant":
        if not i.HasField("literal"):
            raise ProtoError(f"{where}a constant without a literal")
        operands = ()
        literal = literal_ir(i.literal, shape, where, r.limits)
    return op, shape, operands, literal, pnum, a


def _instruction(r, i, comp: str) -> Instruction:
    """COMP: how messages name the instruction's computation (`computation NAME, instruction `)."""
    name = i.name
    if not NAME_RE.fullmatch(name) or name in ELEMENT_TYPES:    # (`%f32` reads as an element type)
        where = f"{comp}{name_label(name) if name else '#' + str(i.id)}: "
        raise ProtoError(f"{where}the name {shown_text(name)} cannot be written as HLO text")
    where = f"{comp}{name}: "
    op, shape, operands, literal, pnum, a = _head(r, i, where)
    sugar = r.sugar_of(i)
    if sugar is not None:
        op = sugar.opcode + op[len("async"):]
        a = _Attrs(op)
        a.kinds = _sugar_kinds(op)
        if i.opcode == "async-start":
            if i.async_execution_thread and i.async_execution_thread != "main":
                a.put("async_execution_thread", Quoted(i.async_execution_thread))
            _extra_attributes(r, sugar, sugar.opcode, a, where, frontend=not len(i.frontend_attributes.map))
            if len(i.output_operand_aliasing):
                a.typed("output_to_operand_aliasing", _aliasing(i.output_operand_aliasing))
        _common(r, i, a, where)
    else:
        _extra_attributes(r, i, op, a, where)
    if i.HasField("original_value"):
        ov = i.original_value
        if ov.is_synthetic_call and not len(ov.elements):
            a.put("origin", _group([Group("[", (Word("synthetic_call"),))]))
        elif len(ov.elements):
            a.put("origin", _group([_origin(ov, i.shape)]))
    md = metadata_text(i.metadata, r.m.payloads) if i.HasField("metadata") else None
    if md is not None:
        a.typed("metadata", Metadata(md))
    config = backend_config_text(i, r.m.payloads, where)
    if config is not None:
        a.typed("backend_config", BackendConfig(config))
    return Instruction(name, op, shape, operands, a.decoded(where), literal, pnum, _NOWHERE, None)


def _origin(ov, shape_proto):
    """XLA's OriginalValue: the instruction's shape tree with, at each leaf, the original array
    ({"name" {index}}) or {} when there is none (the generic value of its text)."""
    leaves = {tuple(e.shape_index): e.original_array for e in ov.elements}

    def walk(sp, index):
        if sp.element_type == 13:
            return _group([walk(t, index + (k,)) for k, t in enumerate(sp.tuple_shapes)], "(")
        arr = leaves.get(index)
        if arr is None or not arr.instruction_name:
            return IntList()
        name = Quoted(arr.instruction_name, quote_text(arr.instruction_name))
        return Group("{", (name, _ints(arr.shape_index)) if len(arr.shape_index) else (name,))
    return walk(shape_proto, ())


_NOWHERE = Loc("<proto>", 0, 0)     # until located_text gives the line of the printed text


def _sugar_kinds(op: str) -> dict:
    """The attribute kinds of the async sugar `<op>-start/-update/-done`: the wrapped opcode's and
    async-start's own."""
    base, _, step = op.rpartition("-")
    kinds = dict(OPCODES["async-" + step].attrs)
    kinds.update(OPCODES[base].attrs)
    return kinds


# ----------------------------------------------------------------------------- computations, module

def _computation(r, c, is_entry: bool, filename: str) -> Computation:
    where = f"computation {name_label(c.name)}: "
    insts, ids, root_id = r.scheduled(c)
    params = sorted((i for i in insts if i.opcode == "parameter"), key=lambda i: i.parameter_number)
    sig = tuple((p.name, shape_of(p.shape, where)) for p in params)
    result = shape_of(ids[root_id].shape, where)
    named = f"computation {name_label(c.name)}, instruction "
    built = tuple(_instruction(r, i, named) for i in insts)
    thread = c.execution_thread if c.execution_thread and c.execution_thread != "main" else None
    return Computation(c.name, built, ids[root_id].name, is_entry, sig, result, thread, True, Loc(filename, 0, 0))


def _header(r) -> dict:
    """The module's header attributes (HloModule line), as the IR holds them."""
    m, cfg = r.m, r.config
    h: dict = {}
    if m.HasField("schedule") and len(m.schedule.sequences) > 0:
        h["is_scheduled"] = True
    aliases = tuple((tuple(e.output_shape_index), int(e.parameter_number), tuple(e.parameter_shape_index),
                     "must-alias" if e.kind == 2 else "may-alias") for e in m.input_output_alias.entries)
    if aliases:
        h["input_output_alias"] = InputOutputAlias(aliases)
    donors = tuple((int(e.parameter_number), tuple(e.parameter_shape_index)) for e in m.buffer_donor.entries)
    if donors:
        h["buffer_donor"] = BufferDonors(donors)
    if cfg is not None and cfg.alias_passthrough_params:
        h["alias_passthrough_params"] = True
    ps = m.host_program_shape if m.HasField("host_program_shape") else None
    if cfg is not None and cfg.HasField("entry_computation_layout") and (
            ps is None or same_program(ps, cfg.entry_computation_layout)):
        ps = cfg.entry_computation_layout
    if ps is not None:
        h["entry_computation_layout"] = ComputationLayout(
            tuple(shape_of(p, "entry layout: ") for p in ps.parameters), shape_of(ps.result, "entry layout: "))
    if cfg is not None:
        for flag in ("allow_spmd_sharding_propagation_to_parameters", "allow_spmd_sharding_propagation_to_output"):
            vals = list(getattr(cfg, flag))
            if len(vals) > 1 or (vals and vals[-1]):
                h[flag] = tuple(bool(v) for v in vals)
        if cfg.replica_count not in (0, 1):
            h["replica_count"] = int(cfg.replica_count)
        if cfg.num_partitions not in (0, 1):
            h["num_partitions"] = int(cfg.num_partitions)
    elif m.HasField("device_assignment"):
        da = m.device_assignment
        if da.replica_count > 1:
            h["replica_count"] = int(da.replica_count)
        if da.computation_count > 1:
            h["num_partitions"] = int(da.computation_count)
    if len(m.frontend_attributes.map):
        h["frontend_attributes"] = _frontend(m.frontend_attributes, "the module: ")
    if len(m.original_value_recovery_table.entries):
        h["origin_recovery_table"] = RawValue(_recovery_table(m.original_value_recovery_table, r.limits))
    return h


def _recovery_table(table, limits) -> str:
    """XLA's OriginalValueRecoveryTable as the IR keeps it (the generic text of `{old} : {new}` entries,
    a recovery module after a comma as a quoted string: its text, the IR printer's, indented by two
    levels, between quotes as it is)."""
    def array(a):
        name = quote_text(a.instruction_name)
        return "{" + name + (" {" + ",".join(str(int(k)) for k in a.shape_index) + "}" if len(a.shape_index) else "") + "}"
    entries = []
    for e in table.entries:
        entry = f"{array(e.old_original_array)}:{array(e.new_original_array)}"
        if e.HasField("recovery_module"):
            from ..ir.printer import format_module
            text = format_module(module_ir(e.recovery_module, "<recovery module>", limits))
            if '"' in text or "\\" in text:
                raise ProtoError("the origin recovery table: a recovery module holding a quoted string "
                                 "cannot be written as HLO text")
            indented = "".join(("    " + ln if ln.strip() else ln) for ln in text.splitlines(True))
            entry += ',"\n' + indented + '\n  "'
        entries.append(entry)
    return "{" + " ".join(entries) + "}"


def _stack_frames(m) -> StackFrames:
    sf = m.stack_frame_index
    return StackFrames(
        {k: n for k, n in enumerate(sf.file_names, 1)},
        {k: n for k, n in enumerate(sf.function_names, 1)},
        {k: FileLocation(f.file_name_id, f.function_name_id, f.line, f.end_line, f.column, f.end_column)
         for k, f in enumerate(sf.file_locations, 1)},
        {k: StackFrame(f.file_location_id, f.parent_frame_id + 1) for k, f in enumerate(sf.stack_frames, 1)})


def module_ir(module, filename: str, limits=None, config=None) -> Module:
    """The IR of an HloModuleProto message, located in its printed text (located_text); CONFIG, an
    HloModuleConfigProto, gives the header what the module proto lacks.  Raises ProtoError."""
    r = ProtoIndex(module, limits)
    r.config = config
    m = module
    if not m.computations:
        raise ProtoError("the module holds no computation")
    entry = r.entry_name()
    if m.name and not NAME_RE.fullmatch(m.name):
        raise ProtoError(f"the module name {shown_text(m.name)} cannot be written as HLO text")
    header = _header(r)
    comps = tuple(_computation(r, c, c.name == entry, filename) for c in r.print_order())
    return Module(m.name or "unnamed", comps, entry, header, _stack_frames(m), True, filename)


def located_text(module: Module) -> tuple[Module, str]:
    """(MODULE, its text): the text is the IR printer's (ir.printer.format_module), and each computation
    and instruction of MODULE, which module_ir has just built and nothing else holds yet, is given the
    location of its line in that text (set in place: the IR is frozen once this returns)."""
    import re

    from ..ir.printer import format_module
    text = format_module(module)
    file = module.source
    comps = {c.name: c for c in module.computations}
    head = re.compile(r"(ENTRY )?%([^\s(]+) ")
    inst = re.compile(r"  (ROOT )?%([^\s=]+) = ")
    cur, locs, done = None, {}, set()
    setloc = object.__setattr__
    for n, line in enumerate(text.split("\n"), 1):
        if cur is None:
            m = head.match(line)
            if m and m.group(2) in comps and m.group(2) not in done:
                cur = comps[m.group(2)]
                setloc(cur, "loc", Loc(file, n, m.start(2)))
                locs = {}
            continue
        if line.startswith("}"):
            for i in cur.instructions:
                if i.name in locs:
                    setloc(i, "loc", locs[i.name])
            done.add(cur.name)
            cur = None
            continue
        m = inst.match(line)
        if m:
            locs[m.group(2)] = Loc(file, n, m.start(2))
    return module, text
