"""Typed errors with source locations, and the documented exit codes.

Library code raises these; only hlo_cli/cli prints them and exits.
"""
from __future__ import annotations

from dataclasses import dataclass


class ExitCode:
    OK = 0
    FAILURE = 1          # the module is wrong: syntax/shape error, runtime failure, mismatch
    USAGE = 2            # bad command line, unreadable or unusable input file
    INTERNAL = 3         # a bug in hlo itself (reported without a traceback unless HLO_DEBUG=1)
    OUT_OF_MEMORY = 4    # the run needs more memory than can be allocated (not a fault of the module)
    MEMORY_LIMIT = 5     # refused before running: the run's estimated memory is above the limit
                         # (--max-memory, by default what the machine has; --max-memory none skips)
    REFERENCE_FAILED = 6  # the reference could not run (--reference xla: JAX missing, XLA refused or
                          # crashed on the module, too few devices); hlo's own results are still reported
    UNSUPPORTED = 7      # hlo cannot run this module: an instruction it has no implementation of (a
                         # custom-call target such as a compiled Triton or Mosaic kernel); not a fault of the module.
                         # hlo diff: nothing differed up to where a module stopped
    UNDECIDED = 8        # hlo bisect reached no verdict: stages that could not be run leave it open


@dataclass
class Diagnostic:
    message: str
    file: str = "<string>"
    line: int = 0
    column: int = 0
    severity: str = "error"
    code: str = "E000"
    instruction: str | None = None
    source_line: str | None = None

    @property
    def location(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}:{self.column}"
        return self.file

    def format(self, with_source: bool = True) -> str:
        text = f"{self.location}: {self.severity}: {self.message}"
        if with_source and self.source_line is not None and self.line:
            src = self.source_line.rstrip("\n")
            # keep very long lines readable: show a window around the column
            col = max(self.column, 1)
            if len(src) > 160:
                start = max(0, col - 80)
                snippet = ("..." if start else "") + src[start:start + 160] + ("..." if start + 160 < len(src) else "")
                caret_col = col - start + (3 if start else 0)
            else:
                snippet, caret_col = src, col
            text += "\n  " + snippet + "\n  " + " " * (caret_col - 1) + "^"
        return text



def instruction_diagnostic(inst, message: str, code: str) -> Diagnostic:
    """An error located at an IR instruction (its source position and name)."""
    loc = inst.loc
    return Diagnostic(message, loc.file, loc.line, loc.column, "error", code, inst.name)

class HloError(Exception):
    """Base of all errors about a user's module or inputs."""
    exit_code = ExitCode.FAILURE

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None):
        super().__init__(message)
        self.diagnostics = diagnostics or []

    def format(self) -> str:
        if self.diagnostics:
            return "\n".join(d.format() for d in self.diagnostics)
        return f"error: {self}"


class HloWarning(UserWarning):
    """Something a run did that the user should know about its results (the CLI prints it as
    `warning: ...` on stderr), e.g. a GPU kernel's random bits that cannot be reproduced."""


class HloSyntaxError(HloError):
    """The text is not valid HLO (syntax, names, literals, attributes)."""


class HloShapeError(HloError):
    """The module is syntactically valid but violates XLA's shape rules."""


class HloEvalError(HloError):
    """Evaluation failed."""


class HloUnsupportedError(HloEvalError):
    """hlo cannot run the module: it has instructions hlo has no implementation of (custom-call
    targets the registry does not run: compiled device code, an unknown kernel).  Not a fault of the
    module (exit code 7).  `uses` holds what cannot run (hlo_cli.support.CustomCallUse: the
    target, every instruction calling it, what it is), `hint` what to do instead; format() gives
    the headline, one located line per target, and the hint."""
    exit_code = ExitCode.UNSUPPORTED

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None, *, uses=(),
                 hint: str | None = None):
        super().__init__(message, diagnostics)
        self.uses = tuple(uses)
        self.hint = hint

    def format(self) -> str:
        if not self.uses:
            text = super().format()
            return text + (f"\n{self.hint}" if self.hint else "")
        head, *rest = str(self).split("\n")
        where = self.diagnostics[0].file if self.diagnostics else "<string>"
        lines = [f"{where}: error: {head}"]
        lines += [f"  {d.location}: {d.message}" for d in self.diagnostics]
        if self.hint:
            lines.append(self.hint)
        return "\n".join(lines)


class HloInputError(HloError):
    """A file or argument given on the command line cannot be used."""
    exit_code = ExitCode.USAGE


class HloResourceError(HloError):
    """The work asked for needs more memory than can be allocated (says what, and how many bytes).
    `instruction` names the instruction whose evaluation failed, `result_bytes` is the size of its
    result from its shape, `requested_bytes` what the failing allocation asked for when known."""
    exit_code = ExitCode.OUT_OF_MEMORY

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None, *,
                 instruction: str | None = None, requested_bytes: int | None = None,
                 result_bytes: int | None = None):
        super().__init__(message, diagnostics)
        self.instruction = instruction
        self.requested_bytes = requested_bytes
        self.result_bytes = result_bytes


class HloMemoryLimitError(HloResourceError):
    """Refused before running: the memory the run is estimated to need (`total`, from
    interpreter.memory.estimate, kept in `estimate`) is above `limit` bytes.  `instruction` names
    where the peak is reached."""
    exit_code = ExitCode.MEMORY_LIMIT

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None, *, estimate=None,
                 limit: int | None = None, total: int | None = None, instruction: str | None = None):
        super().__init__(message, diagnostics, instruction=instruction, requested_bytes=total)
        self.estimate = estimate
        self.limit = limit
        self.total = total


class HloReferenceError(HloError):
    """The reference run (`hlo run --reference xla`) could not be made: JAX is not installed, XLA
    refused the module or crashed on it, or the devices it needs are missing.  `kind` says which
    (missing, refused, crashed, devices), `stage` where XLA stopped (parse, compile, run)."""
    exit_code = ExitCode.REFERENCE_FAILED

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None, *, kind: str = "refused",
                 stage: str | None = None, xla_message: str | None = None):
        super().__init__(message, diagnostics)
        self.kind = kind
        self.stage = stage
        self.xla_message = xla_message
