"""Helpers of the proto tests: XLA's proto of a module and XLA's own text of that proto, and a
comparison of two IR modules that says where they differ (positions ignored)."""
from __future__ import annotations


def xla_proto_and_text(text: str) -> tuple[bytes, str]:
    """XLA's serialized HloModuleProto of `text`, and the text XLA prints for the module it reads
    back from that proto (large constants printed in full)."""
    from jaxlib import _hlo

    from hlo_cli.tools.xla_reference import parse_with_xla
    pb = parse_with_xla(text).as_serialized_hlo_module_proto()
    back = _hlo.HloModule.from_serialized_hlo_module_proto(pb)
    opts = _hlo.HloPrintOptions()
    opts.print_large_constants = True
    return pb, back.to_string(opts)


def first_difference(a, b) -> str | None:
    """None when two IR modules are equal (positions ignored), else a sentence naming the first
    difference."""
    if a == b:
        return None
    if a.name != b.name or a.entry != b.entry:
        return f"module name/entry: {a.name}/{a.entry} vs {b.name}/{b.entry}"
    if dict(a.attrs) != dict(b.attrs):
        keys = sorted(set(a.attrs) | set(b.attrs))
        for k in keys:
            if a.attrs.get(k) != b.attrs.get(k):
                return f"module attribute {k}: {a.attrs.get(k)!r} vs {b.attrs.get(k)!r}"
    if a.stack_frames != b.stack_frames:
        return "stack frames differ"
    if [c.name for c in a.computations] != [c.name for c in b.computations]:
        return f"computations: {[c.name for c in a.computations]} vs {[c.name for c in b.computations]}"
    for ca, cb in zip(a.computations, b.computations):
        if ca == cb:
            continue
        if (ca.root, ca.is_entry, ca.execution_thread) != (cb.root, cb.is_entry, cb.execution_thread):
            return f"computation {ca.name}: root/entry/thread differ"
        if [i.name for i in ca.instructions] != [i.name for i in cb.instructions]:
            return f"computation {ca.name}: instruction order differs"
        for ia, ib in zip(ca.instructions, cb.instructions):
            if ia == ib:
                continue
            for f in ("opcode", "shape", "operands", "literal", "parameter_number"):
                if getattr(ia, f) != getattr(ib, f):
                    return f"{ca.name}/{ia.name}: {f}: {getattr(ia, f)!r} vs {getattr(ib, f)!r}"
            keys = sorted(set(ia.attrs) | set(ib.attrs))
            for k in keys:
                if ia.attrs.get(k) != ib.attrs.get(k):
                    return f"{ca.name}/{ia.name}: attribute {k}: {ia.attrs.get(k)!r} vs {ib.attrs.get(k)!r}"
    return "modules differ"
