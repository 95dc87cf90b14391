"""Before a module runs: the checker's verdict (CheckFailed, printed as `hlo check` prints it), elided
constants refused, and whether the file is an HloSnapshot holding the arguments of an execution.
`hlo run`, `hlo diff` and the tools share these steps.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..errors import Diagnostic, HloEvalError, HloShapeError


def format_diagnostic(d: Diagnostic) -> str:
    """FILE:LINE:COL: severity: first line of the message, the source line with a caret, then the
    message's notes (its further lines)."""
    head, sep, notes = d.message.partition("\n")
    if not sep:
        return d.format()
    return replace(d, message=head).format() + "\n" + notes


class CheckFailed(HloShapeError):
    """The checker's errors, printed as `hlo check` prints them (source line, caret, notes)."""

    def format(self) -> str:
        return "\n".join(format_diagnostic(d) for d in self.diagnostics)


def check_before_running(module, text, replicas=None, partitions=None):
    raise_check_errors(module, check_errors(module, text, replicas, partitions))


def check_errors(module, text, replicas=None, partitions=None) -> list[Diagnostic]:
    """The checker's errors of MODULE (parsed from TEXT): what `hlo run` refuses to run."""
    from ..checker import check_module
    return [d for d in check_module(module, text, warnings=False, replicas=replicas, partitions=partitions)
            if d.severity == "error"]


def raise_check_errors(module, diags: list[Diagnostic]) -> None:
    """Raise CheckFailed for the checker's errors DIAGS (check_errors'), nothing when there is none."""
    if diags:
        n = len(diags)
        msg = (f"{n} error{'s' if n != 1 else ''} found by the checker; not running the module "
               f"(pass --no-check to run it anyway)")
        raise CheckFailed(msg, diags + [Diagnostic(msg, module.source, code="C000")])


def has_elided_constants(module) -> bool:
    """Whether a constant of MODULE had its values elided in the dump ({...})."""
    return any(inst.opcode == "constant" and inst.literal is not None and has_elided(inst.literal)
               for comp in module.computations for inst in comp.instructions)


def refuse_elided(module, src):
    diags = []
    for comp in module.computations:
        for inst in comp.instructions:
            lit = inst.literal
            if inst.opcode == "constant" and lit is not None and has_elided(lit):
                loc = inst.loc
                diags.append(Diagnostic(f"{inst.name}: this constant's values were elided in the dump ({{...}})",
                                        loc.file, loc.line, loc.column, "error", "R002", inst.name,
                                        src.line_text(loc.line) if src is not None and loc.line else None))
    if diags:
        n = len(diags)
        shown = diags[:5]
        more = [Diagnostic(f"... and {n - 5} more elided constants", module.source, code="R002")] if n > 5 else []
        summary = Diagnostic(f"{n} constant{'s' if n != 1 else ''} elided ({{...}}): refusing to invent "
                             f"{'their' if n != 1 else 'its'} values; re-dump with the constants printed "
                             f"(--xla_dump_large_constants), or pass --allow-elided-constants=zeros|random "
                             f"to run anyway", module.source, code="R002")
        raise HloEvalError(summary.message, shown + more + [summary])


def has_elided(lit) -> bool:
    if getattr(lit, "elided", False):
        return True
    if lit.shape.is_tuple and isinstance(lit.value, (tuple, list)):
        return any(has_elided(e) for e in lit.value)
    return False


def snapshot_of(module_file):
    """The HloSnapshot MODULE_FILE is (its arguments and stored result), or None.  An
    HloUnoptimizedSnapshot (--xla_dump_hlo_unoptimized_snapshots: the module before optimizations
    and the arguments of an execution, no result) runs on its arguments too."""
    # (--xla_dump_hlo_as_text writes an HloUnoptimizedSnapshot as *.hlo_unoptimized_snapshot.txt)
    text_snapshot = module_file != "-" and Path(module_file).name.lower().endswith("snapshot.txt")
    if module_file == "-" or (Path(module_file).suffix.lower() not in (".pb", ".pbtxt", ".textproto")
                              and not text_snapshot):
        return None                                  # (protobuf is imported for protos only)
    from ..sources.proto import is_proto_path, read_snapshot
    if not (is_proto_path(module_file) or text_snapshot):
        return None
    if text_snapshot and not is_proto_path(module_file):
        from ..errors import HloError
        try:
            snap = read_snapshot(module_file)
        except HloError:
            return None                              # HLO text that happens to be named so
        return snap if snap.kind == "HloUnoptimizedSnapshot" and snap.arguments else None
    snap = read_snapshot(module_file)
    return snap if snap.kind in ("HloSnapshot", "HloUnoptimizedSnapshot") and snap.arguments else None


def load_checked(path: str, choice: str | None = None, check: bool = True, elided_constants: str | None = None,
                 use_cache: bool = True, option: str = "--module") -> tuple:
    """(the module of PATH, its text), checked as `hlo run` checks it before running (CHECK), its
    elided constants refused unless ELIDED_CONSTANTS says how to fill them."""
    from ..sources import load
    mod, src = load(path, choice, use_cache, option)
    if check:
        check_before_running(mod, src.text)
    if elided_constants is None:
        from ..checker.positions import SourceIndex
        refuse_elided(mod, SourceIndex(src.text))
    return mod, src.text


def resolve_stage(path: str, module_choice: str | None, stage: str | None, stage_option: str = "--stage",
                  module_option: str = "--module", note=lambda text: None) -> tuple[str, str | None]:
    """(the file to read, the --module choice within it) for PATH and the --module/--stage options:
    a stage of an XLA dump directory becomes its file (NOTE hears it when the choice was not the
    only one possible); anything else is left as it was.  Raises HloInputError (exit 2) for --stage
    on a file, and for a dump directory without --stage (commands that read one module)."""
    from ..errors import HloInputError
    is_dir = path != "-" and Path(path).is_dir()
    if not is_dir and stage is None:
        return path, module_choice              # (a file: the dump directories' reader not even imported)
    from ..sources.dumpdir import is_dump_dir, read_dump_dir
    if stage is not None:
        if not is_dir:
            msg = f"{stage_option} picks a stage of an XLA dump directory (--xla_dump_to=DIR); this is not a directory"
            raise HloInputError(f"{path}: {msg}", [Diagnostic(msg, path, code="E084")])
        sel = read_dump_dir(path).select(module_choice, stage)
        if sel.note:
            note(f"note: {sel.note}")
        return sel.stage.path, None
    if is_dir and is_dump_dir(path):
        dd = read_dump_dir(path)
        which = "" if len(dd.modules) == 1 else f" {module_option} NAME"
        msg = (f"an XLA dump directory ({len(dd.modules)} module{'s' if len(dd.modules) != 1 else ''}); choose a "
               f"stage with{which} {stage_option} before_optimizations|after_optimizations|PASS (hlo info {path} "
               f"lists them)")
        raise HloInputError(f"{path}: {msg}", [Diagnostic(msg, path, code="E084")])
    return path, module_choice
