"""TEST ONLY: the old way hlo read a module proto, kept to prove the new one (test_proto_ir.py): the
module printed as HLO text the way XLA prints it (``HloModule::CreateFromProto`` then ``ToString``),
for the parser to read.  hlo itself decodes protos straight into the IR (hlo_cli/sources/proto_ir.py)
and has one printer (hlo_cli/ir/printer.py).
"""
from __future__ import annotations

import numpy as np

from hlo_cli.ir.attributes import COMPARISON_ORDERS, Window, WindowDim
from hlo_cli.ir.literal import format_literal
from hlo_cli.ir.shape import Shape
from hlo_cli.sources.proto_fields import (
    API_VERSIONS, backend_config_text, handler_table, CONV_KINDS, DISTRIBUTIONS, DOT_ALGORITHMS, FFT_TYPES,
    FLOAT_TYPES, GATHER_DIMS, NAME_RE, PADDING_TYPES, PRECISIONS, RNG_ALGORITHMS, SCATTER_DIMS,
    SCHEDULES, TO_APPLY, TRANSPOSE_KINDS, ProtoIndex, axis_ref, bare_word, check_enum_word,
    conv_labels, default_comparison_order, default_comparison_type, enum_name, float32_text, mesh_text,
    metadata_text, name_label, number_text, oneline_literal, quote_text, raw_json_ok,
    same_program, sharding_text, shown_text)
from hlo_cli.sources.proto_literal import literal_ir
from hlo_cli.sources.proto_shape import ProtoError, shape_of


def _ints(xs) -> str:
    return "{" + ",".join(str(int(x)) for x in xs) + "}"


# ----------------------------------------------------------------------------- literals

def literal_text(lp, shape: Shape, where: str = "", limits=None) -> str:
    """A LiteralProto as HLO literal text (through the IR's literal printer; large arrays without
    NaNs through NumPy's shortest round-trip spelling, element loops in C)."""
    lit = literal_ir(lp, shape, where, limits)
    if not shape.is_tuple and shape.rank and lit.value.size > 256:
        fast = _array_text(lit.value, shape.element_type)
        if fast is not None:
            return fast
    return format_literal(lit)


def _array_text(arr: np.ndarray, et: str) -> str | None:
    """Nested-brace text of a large array (None: leave it to the literal printer)."""
    if et == "pred":
        words = np.where(arr, "true", "false")
        words = words.reshape(-1).tolist()
    elif et in ("c64", "c128"):
        if np.isnan(arr.real).any() or np.isnan(arr.imag).any():
            return None
        fmt = "(%.9g, %.9g)" if et == "c64" else "(%.17g, %.17g)"
        words = [fmt % (z.real, z.imag) for z in arr.reshape(-1).tolist()]
    elif et in FLOAT_TYPES:
        # 9 (f32) / 17 (f64) significant digits read back to the same value; the narrow types
        # are exact in f32.  NaN payloads and signs are left to the literal printer.
        wide = arr if et in ("f32", "f64") else arr.astype(np.float32)
        if np.isnan(wide).any():
            return None
        words = list(map(("%.17g" if et == "f64" else "%.9g").__mod__, wide.reshape(-1).tolist()))
    else:
        words = list(map(str, arr.reshape(-1).tolist()))
    dims = arr.shape
    last = dims[-1]
    level = ["{" + ", ".join(words[k:k + last]) + "}" for k in range(0, len(words), last)] if last else \
        ["{}"] * (int(np.prod(dims[:-1])) if len(dims) > 1 else 1)
    for d in reversed(dims[:-1]):
        level = ["{ " + ", ".join(level[k:k + d]) + " }" for k in range(0, len(level), d)] if d else ["{}"]
    return level[0] if level else "{}"


# ----------------------------------------------------------------------------- attribute texts


def frontend_text(fa, where: str = "") -> str:
    items = sorted(fa.map.items())
    return "{" + ",".join(f"{bare_word(k, 'frontend attribute key', where)}=" +
                          (v if raw_json_ok(v, "frontend_attributes") else quote_text(v)) for k, v in items) + "}"


def _window(w) -> str:
    """A WindowProto as the text prints it (the IR's Window does the printing)."""
    return str(Window(tuple(WindowDim(int(d.size), int(d.stride), int(d.padding_low), int(d.padding_high),
                                      int(d.window_dilation), int(d.base_dilation), bool(d.window_reversal))
                            for d in w.dimensions)))


def _precision(pc, out: list, where: str):
    ps = list(pc.operand_precision)
    if any(p != 0 for p in ps):
        for p in ps:
            if p not in PRECISIONS:
                raise ProtoError(f"{where}operand precision {p} unknown")
        out.append("operand_precision={" + ",".join(PRECISIONS[p] for p in ps) + "}")
    if pc.algorithm:
        if pc.algorithm not in DOT_ALGORITHMS:
            raise ProtoError(f"{where}dot algorithm {pc.algorithm} unknown")
        out.append("algorithm=" + DOT_ALGORITHMS[pc.algorithm])


def _sparsity(i, a: list):
    sc = i.sparsity_config
    parts = []
    for side in ("lhs", "rhs"):
        if sc.HasField(side):
            t = getattr(sc, side)
            parts.append(f"{side}={{sparsity={t.num_non_zero}x{t.block_size} dimension={t.dimension} stride={t.stride}}}")
    if parts:
        a.append("sparsity_config={" + " ".join(parts) + "}")


def _dot_dnums(d) -> str:
    r = []
    if len(d.lhs_batch_dimensions):
        r.append("lhs_batch_dims=" + _ints(d.lhs_batch_dimensions))
    r.append("lhs_contracting_dims=" + _ints(d.lhs_contracting_dimensions))
    if len(d.rhs_batch_dimensions):
        r.append("rhs_batch_dims=" + _ints(d.rhs_batch_dimensions))
    r.append("rhs_contracting_dims=" + _ints(d.rhs_contracting_dimensions))
    return ", ".join(r)


def _replica_groups(ip, where: str) -> str:
    if ip.HasField("iota_collective_device_list"):
        il = ip.iota_collective_device_list
        s = f"[{il.num_replica_groups},{il.num_devices_per_group}]<=[" + ",".join(map(str, il.iota_reshape_dims)) + "]"
        perm = list(il.iota_transpose_perm)
        if perm and perm != sorted(perm):
            s += "T(" + ",".join(map(str, perm)) + ")"
        return s
    if ip.HasField("mesh_axes_replica_group_list"):
        ml = ip.mesh_axes_replica_group_list
        return mesh_text(ml.mesh, where) + " {" + ",".join(axis_ref(a, ml.mesh, where) for a in ml.axes) + "}"
    groups = ip.collective_device_list.replica_groups if ip.HasField("collective_device_list") else ip.replica_groups
    return "{" + ",".join(_ints(g.replica_ids) for g in groups) + "}"


def _aliasing(entries) -> str:
    return "{" + ", ".join(f"{_ints(e.output_shape_index)}: ({e.operand_index}, {_ints(e.operand_shape_index)})"
                           for e in entries) + "}"


# ----------------------------------------------------------------------------- the module

class ProtoRenderer(ProtoIndex):


    def text(self) -> str:
        m = self.m
        if not m.computations:
            raise ProtoError("the module holds no computation")
        entry = self.entry_name()
        if m.name and not NAME_RE.fullmatch(m.name):
            raise ProtoError(f"the module name {shown_text(m.name)} cannot be written as HLO text")
        head = "HloModule " + (m.name or "unnamed")
        scheduled = m.HasField("schedule") and len(m.schedule.sequences) > 0
        if scheduled:
            head += ", is_scheduled=true"
        aliases = []
        for e in m.input_output_alias.entries:
            kind = "must-alias" if e.kind == 2 else "may-alias"
            aliases.append(f"{_ints(e.output_shape_index)}: ({e.parameter_number}, "
                           f"{_ints(e.parameter_shape_index)}, {kind})")
        if aliases:
            head += ", input_output_alias={ " + ", ".join(aliases) + " }"
        donors = [f"({e.parameter_number}, {_ints(e.parameter_shape_index)})" for e in m.buffer_donor.entries]
        if donors:
            head += ", buffer_donor={ " + ", ".join(donors) + " }"
        cfg = self.config
        if cfg is not None and cfg.alias_passthrough_params:
            head += ", alias_passthrough_params=true"
        ps = m.host_program_shape if m.HasField("host_program_shape") else None
        if cfg is not None and cfg.HasField("entry_computation_layout") and (
                ps is None or same_program(ps, cfg.entry_computation_layout)):
            ps = cfg.entry_computation_layout        # the config's layouts: what XLA's text prints
        if ps is not None:
            head += (", entry_computation_layout={(" +
                     ", ".join(str(shape_of(p, "entry layout: ")) for p in ps.parameters) + ")->" +
                     str(shape_of(ps.result, "entry layout: ")) + "}")
        if cfg is not None:
            # XLA's HloModule::PrintConfig
            for flag in ("allow_spmd_sharding_propagation_to_parameters", "allow_spmd_sharding_propagation_to_output"):
                vals = list(getattr(cfg, flag))
                if len(vals) > 1 or (vals and vals[-1]):
                    head += f", {flag}={{" + ",".join("true" if v else "false" for v in vals) + "}"
            if cfg.replica_count not in (0, 1):
                head += f", replica_count={cfg.replica_count}"
            if cfg.num_partitions not in (0, 1):
                head += f", num_partitions={cfg.num_partitions}"
        elif m.HasField("device_assignment"):
            # the module's config is not in the proto, but a compiled module's device assignment
            # says how many replicas and partitions it runs on (XLA's own text dump prints them)
            da = m.device_assignment
            if da.replica_count > 1:
                head += f", replica_count={da.replica_count}"
            if da.computation_count > 1:
                head += f", num_partitions={da.computation_count}"
        if len(m.frontend_attributes.map):
            head += ", frontend_attributes=" + frontend_text(m.frontend_attributes, "the module: ")
        table = m.original_value_recovery_table
        if len(table.entries):
            head += ", origin_recovery_table={\n" + self._recovery_table(table) + "}\n"
        out = [head + self._stack_frames() + "\n\n"]
        for c in self.print_order():
            out.append(self._computation(c, c.name == entry))
            out.append("\n\n")
        return "".join(out)

    def _recovery_table(self, table) -> str:
        """XLA's OriginalValueRecoveryTable::ToString: one entry a line, `{old} : {new}`, and after a
        comma the recovery module as a string (its text indented by two levels)."""
        def array(a):
            idx = " " + _ints(a.shape_index) if len(a.shape_index) else ""
            return "{" + quote_text(a.instruction_name) + idx + "}"
        lines = []
        for e in table.entries:
            line = f"  {array(e.old_original_array)} : {array(e.new_original_array)}"
            if e.HasField("recovery_module"):
                text = ProtoRenderer(e.recovery_module, self.limits).text()
                if '"' in text or "\\" in text:
                    # XLA writes the module between quotes as it is: a quote in it would end them
                    raise ProtoError("the origin recovery table: a recovery module holding a quoted string "
                                     "cannot be written as HLO text")
                indented = "".join(("    " + ln if ln.strip() else ln) for ln in text.splitlines(True))
                line += ',\n  "\n' + indented + '\n  "'
            lines.append(line + "\n")
        return "".join(lines)


    def _stack_frames(self) -> str:
        sf = self.m.stack_frame_index
        if not (len(sf.file_names) or len(sf.function_names) or len(sf.file_locations) or len(sf.stack_frames)):
            return ""
        out = ["\n\nFileNames\n"]
        out += [f"{k} {quote_text(n)}\n" for k, n in enumerate(sf.file_names, 1)]
        out.append("\nFunctionNames\n")
        out += [f"{k} {quote_text(n)}\n" for k, n in enumerate(sf.function_names, 1)]
        out.append("\nFileLocations\n")
        out += [f"{k} {{file_name_id={f.file_name_id} function_name_id={f.function_name_id} line={f.line} "
                f"end_line={f.end_line} column={f.column} end_column={f.end_column}}}\n"
                for k, f in enumerate(sf.file_locations, 1)]
        out.append("\nStackFrames\n")
        out += [f"{k} {{file_location_id={f.file_location_id} parent_frame_id={f.parent_frame_id + 1}}}\n"
                for k, f in enumerate(sf.stack_frames, 1)]
        return "".join(out).rstrip("\n")

    def _computation(self, c, is_entry: bool) -> str:
        where = f"computation {name_label(c.name)}: "
        insts, ids, root_id = self.scheduled(c)
        params = sorted((i for i in insts if i.opcode == "parameter"), key=lambda i: i.parameter_number)
        sig = ", ".join(f"{p.name}: {shape_of(p.shape, where).to_str(False)}" for p in params)
        root = ids[root_id]
        head = ("ENTRY " if is_entry else "") + f"%{c.name} ({sig}) -> {shape_of(root.shape, where).to_str(False)} {{\n"
        lines = [head]
        for i in insts:
            lines.append(("  ROOT " if i.id == root_id else "  ") + self._instruction(i, c.name) + "\n")
        lines.append("}")
        if c.execution_thread and c.execution_thread != "main":
            lines.append(f", execution_thread={quote_text(c.execution_thread)}")
        return "".join(lines)


    def _instruction(self, i, comp: str) -> str:
        where = f"computation {name_label(comp)}, instruction {name_label(i.name) if i.name else '#' + str(i.id)}: "
        if not NAME_RE.fullmatch(i.name):
            raise ProtoError(f"{where}the name {shown_text(i.name)} cannot be written as HLO text")
        op = i.opcode
        if not op:
            raise ProtoError(f"{where}an instruction without an opcode")
        shape = shape_of(i.shape, where)
        operands = [self.inst_name(k, where) for k in i.operand_ids]
        a: list[str] = []
        for k in i.called_computation_ids:
            self.comp(k, where)              # every computation it calls must exist
        if op == "parameter":
            operands = [str(i.parameter_number)]
            if len(i.parameter_replication.replicated_at_leaf_buffers):
                a.append("parameter_replication={" + ",".join(
                    "true" if b else "false" for b in i.parameter_replication.replicated_at_leaf_buffers) + "}")
        elif op == "constant":
            if not i.HasField("literal"):
                raise ProtoError(f"{where}a constant without a literal")
            operands = [literal_text(i.literal, shape, where, self.limits)]
        sugar = self.sugar_of(i)
        if sugar is not None:
            op = sugar.opcode + op[len("async"):]
            if i.opcode == "async-start":
                if i.async_execution_thread and i.async_execution_thread != "main":
                    a.append(f"async_execution_thread={quote_text(i.async_execution_thread)}")
                self._extra_attributes(sugar, sugar.opcode, shape_of(sugar.shape, where), a, where,
                                       frontend=not len(i.frontend_attributes.map))
                if len(i.output_operand_aliasing):
                    a.append("output_to_operand_aliasing=" + _aliasing(i.output_operand_aliasing))
            self._common(i, a, where)
        else:
            self._extra_attributes(i, op, shape, a, where)
        if i.HasField("original_value"):
            ov = i.original_value
            if ov.is_synthetic_call and not len(ov.elements):
                a.append("origin={[synthetic_call]}")
            elif len(ov.elements):
                a.append("origin={" + original_value_text(ov, i.shape) + "}")
        md = metadata_text(i.metadata, self.m.payloads) if i.HasField("metadata") else None
        if md is not None:
            a.append("metadata=" + md)
        config = backend_config_text(i, self.m.payloads, where)
        if config is not None:
            a.append("backend_config=" + config)
        text = f"%{i.name} = {shape} {op}(" + ", ".join(operands) + ")"
        return text + "".join(", " + x for x in a)

    def _extra_attributes(self, i, op, shape, a, where, frontend: bool = True):
        """XLA's PrintExtraAttributes: the opcode's own attributes, called computations, then the
        common ones."""
        self._extra(i, op, shape, a, where)
        self._calls(i, op, [self.comp(k, where) for k in i.called_computation_ids], a, where)
        self._common(i, a, where, frontend)

    def _common(self, i, a, where, frontend: bool = True):
        if i.HasField("sharding"):
            a.append("sharding=" + sharding_text(i.sharding, where))
        if frontend and len(i.frontend_attributes.map):
            a.append("frontend_attributes=" + frontend_text(i.frontend_attributes, where))
        if len(i.control_predecessor_ids):
            a.append("control-predecessors={" + ", ".join(self.inst_name(k, where) for k in i.control_predecessor_ids) + "}")
        sv = i.statistics_viz
        if len(sv.statistics):
            a.append(f"statistics={{visualizing_index={sv.stat_index_to_visualize}," +
                     ",".join(f"{bare_word(st.stat_name, 'statistic name', where)}={number_text(st.stat_val)}"
                              for st in sv.statistics) + "}")
        ra = i.result_accuracy
        if ra.mode != 0:
            a.append("result_accuracy={mode=" + enum_name({1: "highest"}, ra.mode, "result accuracy mode", where) + "}")
        elif ra.HasField("tolerance"):
            t = ra.tolerance
            a.append(f"result_accuracy={{tolerance={{atol={number_text(t.atol)},rtol={number_text(t.rtol)},ulps={t.ulps}}}}}")


    def _extra(self, i, op: str, shape: Shape, a: list, where: str):
        """XLA's PrintExtraAttributesImpl: OP's own attributes (the printer _EXTRA names for it)."""
        f = _EXTRA.get(op)
        if f is not None:
            f(self, i, op, shape, a, where)

    def _x_batch_norm(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"epsilon={float32_text(i.epsilon)}")
        a.append(f"feature_index={i.feature_index}")

    def _x_fft(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"fft_type={enum_name(FFT_TYPES, i.fft_type, 'fft_type', where)}")
        a.append("fft_length=" + _ints(i.fft_length))

    def _x_compare(self, i, op: str, shape: Shape, a: list, where: str):
        check_enum_word(op, "direction", "comparison_direction", i.comparison_direction, where)
        check_enum_word(op, "type", "comparison_type", i.comparison_type, where)
        a.append(f"direction={i.comparison_direction}")
        et = self.operand_type(i, 0)
        if i.comparison_type and not i.comparison_order and (
                et is None or i.comparison_type != default_comparison_type(et)):
            a.append(f"type={i.comparison_type}")
        if i.comparison_order:           # the newest XLA's; its comparison_type is a mirror of it
            if i.comparison_order not in COMPARISON_ORDERS:
                raise ProtoError(f"{where}comparison order {i.comparison_order!r} unknown")
            if et is None or i.comparison_order != default_comparison_order(et):
                a.append(f"order={i.comparison_order}")

    def _x_triangular_solve(self, i, op: str, shape: Shape, a: list, where: str):
        o = i.triangular_solve_options
        if o.left_side:
            a.append("left_side=true")
        if o.lower:
            a.append("lower=true")
        if o.unit_diagonal:
            a.append("unit_diagonal=true")
        if o.transpose_a:
            a.append(f"transpose_a={enum_name(TRANSPOSE_KINDS, o.transpose_a, 'transpose_a', where)}")

    def _x_cholesky(self, i, op: str, shape: Shape, a: list, where: str):
        if i.cholesky_options.lower:
            a.append("lower=true")

    def _x_channel_only(self, i, op: str, shape: Shape, a: list, where: str):
        if i.channel_id:
            a.append(f"channel_id={i.channel_id}")
        if i.is_host_transfer:
            a.append("is_host_transfer=true")

    def _x_replica_groups(self, i, op: str, shape: Shape, a: list, where: str):
        if i.channel_id:
            a.append(f"channel_id={i.channel_id}")
        a.append("replica_groups=" + _replica_groups(i, where))
        if i.constrain_layout:
            a.append("constrain_layout=true")
        if op in ("all-gather", "all-gather-start"):
            a.append("dimensions={" + (str(i.dimensions[0]) if len(i.dimensions) else "0") + "}")
            if i.use_global_device_ids:
                a.append("use_global_device_ids=true")
        elif op in ("all-reduce", "all-reduce-start", "reduce-scatter"):
            if i.use_global_device_ids:
                a.append("use_global_device_ids=true")
            if op == "reduce-scatter":
                a.append("dimensions={" + (str(i.dimensions[0]) if len(i.dimensions) else "0") + "}")
        elif op == "all-to-all" and len(i.dimensions):
            a.append("dimensions={" + str(i.dimensions[0]) + "}")

    def _x_collective_permute(self, i, op: str, shape: Shape, a: list, where: str):
        if i.channel_id:
            a.append(f"channel_id={i.channel_id}")
        a.append("source_target_pairs={" + ",".join(f"{{{p.source},{p.target}}}" for p in i.source_target_pairs) + "}")
        sizes = list(i.dynamic_slice_sizes)
        if sizes:
            rank = self.operand_rank(i, 0) or len(sizes)
            a.append("slice_sizes={" + ",".join(_ints(sizes[k:k + rank]) for k in range(0, len(sizes), rank)) + "}")

    def _x_dimensions(self, i, op: str, shape: Shape, a: list, where: str):
        a.append("dimensions=" + _ints(i.dimensions))
        if op == "sort" and i.is_stable:
            a.append("is_stable=true")

    def _x_scan(self, i, op: str, shape: Shape, a: list, where: str):
        a.append("dimensions=" + _ints(i.dimensions))
        a.append(f"num_carries={i.num_carries}")
        if i.is_reverse:
            a.append("is_reverse=true")
        if i.is_associative:
            a.append("is_associative=" + ("true" if i.is_associative == 1 else "false"))

    def _x_topk(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"k={i.k}")
        a.append("largest=" + ("true" if i.largest else "false"))
        if i.is_stable:                  # the newest XLA's stable topk: sort's is_stable field
            a.append("is_stable=true")

    def _x_reshape(self, i, op: str, shape: Shape, a: list, where: str):
        if len(i.dimensions) and i.dimensions[0] != -1:
            a.append(f"inferred_dimension={i.dimensions[0]}")

    def _x_slice(self, i, op: str, shape: Shape, a: list, where: str):
        sl = list(i.slice_dimensions)
        omit = all(s.stride == 1 for s in sl)
        a.append("slice={" + ", ".join(f"[{s.start}:{s.limit}" + ("" if omit else f":{s.stride}") + "]"
                                       for s in sl) + "}")

    def _x_fusion(self, i, op: str, shape: Shape, a: list, where: str):
        check_enum_word(op, "kind", "fusion_kind", i.fusion_kind, where)
        a.append(f"kind={i.fusion_kind}")
        if len(i.output_operand_aliasing):
            a.append("output_to_operand_aliasing=" + _aliasing(i.output_operand_aliasing))

    def _x_rng(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"distribution={enum_name(DISTRIBUTIONS, i.distribution, 'distribution', where)}")

    def _x_get_tuple_element(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"index={i.tuple_index}")

    def _x_reduce_precision(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"exponent_bits={i.exponent_bits}")
        a.append(f"mantissa_bits={i.mantissa_bits}")

    def _x_infeed(self, i, op: str, shape: Shape, a: list, where: str):
        if i.infeed_config:
            a.append("infeed_config=" + quote_text(i.infeed_config.decode("latin-1")))

    def _x_outfeed(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"outfeed_shape={shape_of(i.outfeed_shape, where)}")
        if i.outfeed_config:
            a.append("outfeed_config=" + quote_text(i.outfeed_config.decode("latin-1")))

    def _x_convolution(self, i, op: str, shape: Shape, a: list, where: str):
        if len(i.window.dimensions):
            a.append("window=" + _window(i.window))
        a.append("dim_labels=" + conv_labels(i.convolution_dimension_numbers))
        if i.feature_group_count not in (0, 1):
            a.append(f"feature_group_count={i.feature_group_count}")
        if i.batch_group_count not in (0, 1):
            a.append(f"batch_group_count={i.batch_group_count}")
        if i.conv_kind:
            a.append(f"convolution_kind={enum_name(CONV_KINDS, i.conv_kind, 'conv_kind', where)}")
        _precision(i.precision_config, a, where)
        _sparsity(i, a)
        if i.convolution_field_101:
            raise ProtoError(f"{where}field 101 of xla.HloInstructionProto (a newer XLA's "
                             "convolution setting) is set; hlo does not know what it means, so "
                             "the convolution is not read")

    def _x_reduce_window(self, i, op: str, shape: Shape, a: list, where: str):
        if len(i.window.dimensions):
            a.append("window=" + _window(i.window))

    def _x_custom_call(self, i, op: str, shape: Shape, a: list, where: str):
        if i.HasField("window"):
            a.append("window=" + _window(i.window))
        if i.HasField("convolution_dimension_numbers"):
            a.append("dim_labels=" + conv_labels(i.convolution_dimension_numbers))
        if i.feature_group_count not in (0, 1):
            a.append(f"feature_group_count={i.feature_group_count}")
        if i.batch_group_count not in (0, 1):
            a.append(f"batch_group_count={i.batch_group_count}")
        _precision(i.precision_config, a, where)
        if i.padding_type:
            a.append(f"padding_type={enum_name(PADDING_TYPES, i.padding_type, 'padding_type', where)}")
        a.append("custom_call_target=" + quote_text(i.custom_call_target))
        if i.constrain_layout:
            a.append("operand_layout_constraints={" + ", ".join(
                str(shape_of(s, where)) for s in i.operand_shapes_with_layout) + "}")
        if i.custom_call_has_side_effect:
            a.append("custom_call_has_side_effect=true")
        if i.HasField("literal"):
            lshape = shape_of(i.literal.shape, where)
            a.append("literal=" + oneline_literal(literal_ir(i.literal, lshape, where, self.limits)))
        if len(i.output_operand_aliasing):
            a.append("output_to_operand_aliasing=" + _aliasing(i.output_operand_aliasing))
        if i.custom_call_schedule:
            a.append(f"schedule={enum_name(SCHEDULES, i.custom_call_schedule, 'custom_call_schedule', where)}")
        if i.custom_call_api_version != 1:
            a.append(f"api_version={enum_name(API_VERSIONS, i.custom_call_api_version, 'custom_call_api_version', where)}")

    def _x_pad(self, i, op: str, shape: Shape, a: list, where: str):
        dims = list(i.padding_config.dimensions)
        interior = any(d.interior_padding for d in dims)
        a.append("padding=" + "x".join(f"{d.edge_padding_low}_{d.edge_padding_high}" +
                                       (f"_{d.interior_padding}" if interior else "") for d in dims))

    def _x_dynamic_slice(self, i, op: str, shape: Shape, a: list, where: str):
        a.append("dynamic_slice_sizes=" + _ints(i.dynamic_slice_sizes))

    def _x_gather(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(_index_dnums(i.gather_dimension_numbers, GATHER_DIMS))
        a.append("slice_sizes=" + _ints(i.gather_slice_sizes))
        if i.indices_are_sorted:
            a.append("indices_are_sorted=true")

    def _x_scatter(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(_index_dnums(i.scatter_dimension_numbers, SCATTER_DIMS))
        if i.indices_are_sorted:
            a.append("indices_are_sorted=true")
        if i.unique_indices:
            a.append("unique_indices=true")

    def _x_iota(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"iota_dimension={i.dimensions[0] if len(i.dimensions) else 0}")

    def _x_dot(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(_dot_dnums(i.dot_dimension_numbers))
        _precision(i.precision_config, a, where)
        _sparsity(i, a)

    def _x_ragged_dot(self, i, op: str, shape: Shape, a: list, where: str):
        r = i.ragged_dot_dimension_numbers
        s = _dot_dnums(r.dot_dimension_numbers)
        if len(r.lhs_ragged_dimensions):
            s += ", lhs_ragged_dims=" + _ints(r.lhs_ragged_dimensions)
        if len(r.rhs_group_dimensions):
            s += ", rhs_group_dims=" + _ints(r.rhs_group_dimensions)
        a.append(s)
        _precision(i.precision_config, a, where)

    def _x_domain(self, i, op: str, shape: Shape, a: list, where: str):
        if i.HasField("domain_entry_sharding") and i.HasField("domain_exit_sharding"):
            a.append('domain={kind="sharding", entry=' + sharding_text(i.domain_exit_sharding, where) +
                     ", exit=" + sharding_text(i.domain_entry_sharding, where) + "}")

    def _x_get_dimension_size(self, i, op: str, shape: Shape, a: list, where: str):
        a.append("dimensions={" + (str(i.dimensions[0]) if len(i.dimensions) else "0") + "}")

    def _x_rng_get_and_update_state(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"delta={i.delta}")

    def _x_rng_bit_generator(self, i, op: str, shape: Shape, a: list, where: str):
        a.append(f"algorithm={enum_name(RNG_ALGORITHMS, i.rng_algorithm, 'rng_algorithm', where)}")

    def _x_copy_start(self, i, op: str, shape: Shape, a: list, where: str):
        if i.HasField("cross_program_prefetch_index"):
            a.append(f"cross_program_prefetch_index={i.cross_program_prefetch_index}")

    def _x_async_start(self, i, op: str, shape: Shape, a: list, where: str):
        if i.async_execution_thread and i.async_execution_thread != "main":
            a.append(f"async_execution_thread={quote_text(i.async_execution_thread)}")
        if len(i.output_operand_aliasing):
            a.append("output_to_operand_aliasing=" + _aliasing(i.output_operand_aliasing))


    def _calls(self, i, op: str, calls: list, a: list, where: str):
        if not calls:
            return
        if op == "while":
            if len(calls) != 2:
                raise ProtoError(f"{where}a while calls 2 computations, got {len(calls)}")
            # XLA's while holds (body, condition), prints condition first
            a.append(f"condition={calls[1]}")
            a.append(f"body={calls[0]}")
        elif op == "select-and-scatter":
            if len(calls) != 2:
                raise ProtoError(f"{where}a select-and-scatter calls 2 computations, got {len(calls)}")
            a.append(f"select={calls[0]}")
            a.append(f"scatter={calls[1]}")
        elif op == "conditional":
            if self.operand_type(i, 0) == "pred" and len(calls) == 2:
                a.append(f"true_computation={calls[0]}")
                a.append(f"false_computation={calls[1]}")
            else:
                a.append("branch_computations={" + ", ".join(calls) + "}")
        elif op in TO_APPLY:
            a.append(f"to_apply={calls[0]}")
            if op == "call" and i.is_composite:
                a.append("is_composite=true")
        elif op == "custom-call":
            a.append("called_computations={" + ", ".join(calls) + "}")
        elif op in ("async-start", "async-update", "async-done"):
            if op == "async-start":
                a.append(f"calls={calls[0]}")
        else:
            a.append("calls=" + ", ".join(calls))


# opcode -> its attribute printer
_EXTRA = handler_table({name[3:]: f for name, f in vars(ProtoRenderer).items()
                        if name.startswith("_x_") and name != "_x_dimensions"}, ProtoRenderer._x_dimensions)


def _index_dnums(d, fields) -> str:
    always, when_set = fields
    parts = [f"{f}={_ints(getattr(d, f))}" for f in always]
    parts += [f"{f}={_ints(getattr(d, f))}" for f in when_set if len(getattr(d, f))]
    return ", ".join(parts) + f", index_vector_dim={d.index_vector_dim}"


def original_value_text(ov, shape_proto) -> str:
    """XLA's OriginalValue::ToString: the instruction's shape tree with, at each leaf, the original
    array ({"name" {index}}) or {} when there is none."""
    leaves = {tuple(e.shape_index): e.original_array for e in ov.elements}

    def walk(sp, index):
        if sp.element_type == 13:
            return "(" + ",".join(walk(t, index + (k,)) for k, t in enumerate(sp.tuple_shapes)) + ")"
        arr = leaves.get(index)
        if arr is None or not arr.instruction_name:
            return "{}"
        idx = " " + _ints(arr.shape_index) if len(arr.shape_index) else ""
        return "{" + quote_text(arr.instruction_name) + idx + "}"
    return walk(shape_proto, ())


def module_text(module, limits=None, config=None) -> str:
    """HLO text for an HloModuleProto message; CONFIG, an HloModuleConfigProto (the config.pbtxt XLA
    dumps beside the module), gives the header what the module proto lacks: replica_count,
    num_partitions, the entry layout, the sharding-propagation flags.  Raises ProtoError."""
    r = ProtoRenderer(module, limits)
    r.config = config
    return r.text()


