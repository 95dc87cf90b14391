"""Reading HLO source files (and refusing what is not one): no heavy imports, so a parse-cache hit
does not pay for loading the parser."""
from __future__ import annotations

import os
import re
import stat

from ..errors import Diagnostic, HloInputError

CONTROL_BYTE = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")


_BOM = b"\xef\xbb\xbf"
_NOT_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")      # what bytes.strip() keeps
_ALLOWED_BYTES = bytes(range(0x20, 0x7f)) + b"\t\n\r\x0b\x0c" + bytes(range(0x80, 0x100))


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """'a directory', 'a named pipe (FIFO)', ... for a st_mode that is not a regular file's."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class NotRegularFile(OSError):
    """Raised by open_regular: the path names a directory, a FIFO, a device or a socket."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def open_regular(path: str | os.PathLike):
    """Open PATH for reading in binary mode, refusing at once (before reading a byte, and without
    blocking on a FIFO) anything that is not a regular file.  Raises FileNotFoundError,
    PermissionError, other OSErrors, or NotRegularFile."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(file_kind(mode))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def stdin_problem(stream) -> str | None:
    """Why standard input cannot be read as a module (a device such as /dev/zero would be read
    forever), or None.  Pipes, files and terminals are fine; so is /dev/null (it reads as empty)."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None                             # not a real descriptor (tests, embedding): read it
    if stat.S_ISCHR(st.st_mode) and not stream.isatty():
        try:
            if st.st_rdev == os.stat(os.devnull).st_rdev:
                return None
        except OSError:
            pass
        return "a character device"
    if stat.S_ISBLK(st.st_mode):
        return "a block device"
    return None


def _empty(name: str, stdin: bool) -> HloInputError:
    if stdin:
        msg = "standard input is empty: expected an HLO module"
        return HloInputError(msg, [Diagnostic(msg, name, code="E010")])
    return HloInputError(f"{name} is empty", [Diagnostic("the file is empty: expected an HLO module", name,
                                                         code="E001")])


def read_source(path: str) -> tuple[str, str]:
    """Read an HLO file ('-' for stdin); returns (text, display name).  Raises HloInputError.

    Only regular files and standard input are read: a directory, a FIFO, a device or a socket is
    refused before anything is read.  A file holding nothing but whitespace (after an optional
    UTF-8 byte-order mark) is empty."""
    import sys
    if path == "-":
        name = "<stdin>"
        kind = stdin_problem(sys.stdin.buffer)
        if kind is not None:
            msg = f"standard input is {kind}, not a file or a pipe: expected an HLO module"
            raise HloInputError(msg, [Diagnostic(msg, name, code="E018")])
        data = sys.stdin.buffer.read()
    else:
        name = path
        try:
            with open_regular(path) as f:
                # a binary file is refused from its first block (1 GiB of zeros is not read whole)
                data = f.read(SNIFF_BYTES)
                _refuse_binary(data, name)
                data += f.read()
        except NotRegularFile as e:
            if e.kind == "a directory":
                raise HloInputError(f"{path} is a directory, not an HLO file",
                                    [Diagnostic("is a directory, not an HLO file", name, code="E011")]) from None
            msg = f"is {e.kind}, not a regular file: hlo reads modules from files or from standard input ('-')"
            raise HloInputError(f"{path} {msg}", [Diagnostic(msg, name, code="E018")]) from None
        except FileNotFoundError:
            raise HloInputError(f"{path}: no such file", [Diagnostic("no such file", name, code="E012")]) from None
        except PermissionError:
            raise HloInputError(f"{path}: permission denied",
                                [Diagnostic("permission denied", name, code="E013")]) from None
        except IsADirectoryError:
            raise HloInputError(f"{path} is a directory, not an HLO file",
                                [Diagnostic("is a directory, not an HLO file", name, code="E011")]) from None
        except OSError as e:
            raise HloInputError(f"{path}: {e.strerror}", [Diagnostic(f"cannot read: {e.strerror}", name,
                                                                     code="E014")]) from None
    if _NOT_SPACE.search(data, 3 if data.startswith(_BOM) else 0) is None:     # (no copy of a large file)
        raise _empty(name, path == "-")
    _refuse_binary(data, name)
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


# how much of a file is read to tell binary data from text before the rest is read
SNIFF_BYTES = 1 << 16


def _refuse_binary(data: bytes, name: str) -> None:
    """HloInputError (E015) when DATA (a file or its first block) holds a control byte text has not."""
    # (deleting every allowed byte is much faster than searching for a forbidden one)
    m = CONTROL_BYTE.search(data) if data.translate(None, _ALLOWED_BYTES) else None
    if m is not None:
        k = m.start()
        line = data.count(b"\n", 0, k) + 1
        col = k - data.rfind(b"\n", 0, k)
        what = "unexpected NUL character" if data[k] == 0 else f"unexpected control character 0x{data[k]:02x}"
        binary = data[:4096].count(b"\x00") > 0 and len(CONTROL_BYTE.findall(data[:4096])) > 2
        msg = (f"{what}: this looks like a binary file, not HLO text (a serialized HloModuleProto? print it "
               "as text with XLA's tools first)") if binary else f"{what} (this is a binary file, not HLO text?)"
        end = data.find(b"\n", k)
        src = data[data.rfind(b"\n", 0, k) + 1:end if end >= 0 else min(len(data), k + 200)].decode("utf-8", "replace")
        raise HloInputError(f"{name} is a binary file, not HLO text",
                            [Diagnostic(msg, name, line, col, code="E015", source_line=src)])
