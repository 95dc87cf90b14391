"""Reading HLO source files, and finding the grammar: no heavy imports, so a parse-cache hit
does not pay for loading the parser."""
from __future__ import annotations

import re
from pathlib import Path

from .errors import Diagnostic, HloInputError

_CONTROL_BYTE = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")


_ALLOWED_BYTES = bytes(range(0x20, 0x7f)) + b"\t\n\r\x0b\x0c" + bytes(range(0x80, 0x100))


def grammar_path() -> Path:
    """The grammar shipped inside the wheel, or the repository's grammar/ in a source checkout."""
    here = Path(__file__).resolve().parent
    for cand in (here / "grammar" / "hlo.lark", here.parent / "grammar" / "hlo.lark"):
        if cand.is_file():
            return cand
    raise FileNotFoundError("grammar/hlo.lark is missing from the installation")


def read_source(path: str) -> tuple[str, str]:
    """Read an HLO file ('-' for stdin); returns (text, display name).  Raises HloInputError."""
    import sys
    if path == "-":
        data = sys.stdin.buffer.read()
        name = "<stdin>"
        if not data:
            raise HloInputError("standard input is empty: expected an HLO module",
                                [Diagnostic("standard input is empty: expected an HLO module", name,
                                            code="E010")])
    else:
        name = path
        p = Path(path)
        if p.is_dir():
            raise HloInputError(f"{path} is a directory, not an HLO file",
                                [Diagnostic("is a directory, not an HLO file", name, code="E011")])
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise HloInputError(f"{path}: no such file", [Diagnostic("no such file", name, code="E012")]) from None
        except PermissionError:
            raise HloInputError(f"{path}: permission denied",
                                [Diagnostic("permission denied", name, code="E013")]) from None
        except OSError as e:
            raise HloInputError(f"{path}: {e.strerror}", [Diagnostic(f"cannot read: {e.strerror}", name,
                                                                     code="E014")]) from None
        if not data.strip():
            raise HloInputError(f"{path} is empty", [Diagnostic("the file is empty: expected an HLO module",
                                                                name, code="E001")])
    # (deleting every allowed byte is five times faster than searching for a forbidden one)
    m = _CONTROL_BYTE.search(data) if data.translate(None, _ALLOWED_BYTES) else None
    if m is not None:
        k = m.start()
        line = data.count(b"\n", 0, k) + 1
        col = k - data.rfind(b"\n", 0, k)
        what = "unexpected NUL character" if data[k] == 0 else f"unexpected control character 0x{data[k]:02x}"
        binary = data[:4096].count(b"\x00") > 0 and len(_CONTROL_BYTE.findall(data[:4096])) > 2
        msg = (f"{what}: this looks like a binary file, not HLO text (a serialized HloModuleProto? print it "
               "as text with XLA's tools first)") if binary else f"{what} (this is a binary file, not HLO text?)"
        src = data.split(b"\n")[line - 1].decode("utf-8", "replace") if line else None
        raise HloInputError(f"{name} is a binary file, not HLO text",
                            [Diagnostic(msg, name, line, col, code="E015", source_line=src)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise HloInputError(f"{name} is not UTF-8 text",
                            [Diagnostic(f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
                                        name, line, 1, code="E016")]) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, name
