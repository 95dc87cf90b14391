"""Arrays in and out: reading inputs from .npy/.npz files header first, writing files without ever
replacing or writing through anything that is not ours, summaries of arrays, and values in XLA's
literal format.

Reading: only regular files are opened (a FIFO or a device is refused before a byte is read); the
header of every array (shape, dtype) is read and checked against the parameter it is for before
its data is read or decompressed, so a small archive that inflates to gigabytes, or an array of
the wrong shape, is refused at once.

Writing: every file is created exclusively (O_CREAT|O_EXCL, which never follows a symbolic link)
in its target directory; a file that replaces another is written under a fresh temporary name
next to it and renamed over it, which replaces a link rather than writing through it.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import HloInputError
from ..sources.reading import NotRegularFile, file_kind, open_regular

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


def _fail(msg: str):
    raise HloInputError(msg)


# ----------------------------------------------------------------------------- opening files

def open_input(path: str, what: str):
    """PATH opened for reading, or an HloInputError naming WHAT (the option that gave it)."""
    try:
        return open_regular(path)
    except NotRegularFile as e:
        _fail(f"{what}: {path} is {e.kind}, not a regular file")
    except FileNotFoundError:
        _fail(f"{what}: no such file: {path}")
    except PermissionError:
        _fail(f"{what}: {path}: permission denied")
    except OSError as e:
        _fail(f"{what}: cannot read {path} ({e.strerror or e})")


# ----------------------------------------------------------------------------- .npy headers

@dataclass(frozen=True)
class ArrayHeader:
    """What an .npy header says: the array's shape and dtype (its data not yet read)."""
    shape: tuple
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n * self.dtype.itemsize

    def describe(self) -> str:
        return f"an array of {self.dtype}{list(self.shape)}"


def read_header(f, what: str) -> ArrayHeader:
    """The header of the .npy stream F (positioned at its start); leaves F just after it."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            shape, fortran, dtype = np.lib.format._read_array_header(f, version)
    except Exception as e:  # numpy raises ValueError, OSError, SyntaxError... for bad headers
        _fail(f"{what}: cannot read it as an .npy array ({type(e).__name__}: {e})")
    if dtype.hasobject:
        _fail(f"{what}: cannot read the array: it holds Python objects ({dtype}); hlo reads numeric arrays only")
    return ArrayHeader(tuple(int(d) for d in shape), dtype)


def _read_data(f, what: str) -> np.ndarray:
    """The array of the .npy stream F (positioned at its start), its header already checked."""
    try:
        return np.lib.format.read_array(f, allow_pickle=False)
    except Exception as e:
        _fail(f"{what}: cannot read the array's data ({type(e).__name__}: {e})")


def _kind_of(f) -> str:
    head = f.read(6)
    f.seek(0)
    if head.startswith(_NPY_MAGIC):
        return "npy"
    if head[:4] in _ZIP_MAGICS:
        return "npz"
    return "other"


class ArrayFile:
    """One .npy file, or the .npy members of one .npz archive, whose headers are read on opening
    and whose data is read only when asked for (`load`).  Use as a context manager."""

    def __init__(self, path: str, what: str):
        self.path, self.what = path, what
        self._f = open_input(path, what)
        self._zip = None
        try:
            kind = _kind_of(self._f)
            if kind == "npy":
                self.headers = {None: read_header(self._f, f"{what}: {path}")}
            elif kind == "npz":
                self._open_zip()
            else:
                _fail(f"{what}: cannot read {path}: it is neither an .npy array nor an .npz archive")
        except BaseException:
            self.close()
            raise

    @property
    def is_archive(self) -> bool:
        return self._zip is not None

    def _open_zip(self):
        try:
            self._zip = zipfile.ZipFile(self._f)
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
            _fail(f"{self.what}: cannot read {self.path} as an .npz archive ({type(e).__name__}: {e})")
        self.members, self.headers = {}, {}
        for info in infos:
            if info.is_dir():
                continue
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            where = f"{self.what}: {self.path}[{key}]"
            with self._member(info, where) as m:
                self.headers[key] = read_header(m, where)
            self.members[key] = info

    def _member(self, info, where):
        try:
            return self._zip.open(info)
        except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, NotImplementedError) as e:
            _fail(f"{where}: cannot read the archive member ({type(e).__name__}: {e})")

    def load(self, key=None) -> np.ndarray:
        """The array KEY (None: the single array of an .npy file)."""
        if self._zip is None:
            self._f.seek(0)
            return _read_data(self._f, f"{self.what}: {self.path}")
        where = f"{self.what}: {self.path}[{key}]"
        try:
            with self._member(self.members[key], where) as m:
                return _read_data(m, where)
        except (zipfile.BadZipFile, OSError, EOFError) as e:   # a corrupt stream, a bad CRC
            _fail(f"{where}: cannot read the archive member ({type(e).__name__}: {e})")

    def close(self):
        if self._zip is not None:
            self._zip.close()
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load_array(path: str, what: str) -> np.ndarray:
    """One whole .npy file (a reference for --expect)."""
    with ArrayFile(path, what) as af:
        if af.is_archive:
            _fail(f"{what}: {path} is an .npz archive, not a single .npy array")
        return af.load()


# ----------------------------------------------------------------------------- writing files

def _create_excl(path: Path):
    """A new file at PATH opened for binary writing; FileExistsError if anything is there (a file,
    a directory, a symbolic link even dangling)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    return os.fdopen(os.open(path, flags, 0o666), "wb")


def _write_error(what: str, path, e: OSError) -> HloInputError:
    reason = e.strerror or str(e)         # (numpy's short writes carry no errno: "N requested and M written")
    if e.errno is None and _disk_full(path):
        reason += ": the disk is full"
    return HloInputError(f"{what}: cannot write {path} ({reason})")


def _disk_full(path) -> bool:
    try:
        return os.statvfs(Path(path).parent).f_bavail == 0
    except (OSError, AttributeError):
        return False


def write_new(path: Path, write, what: str) -> Path:
    """Create PATH exclusively and fill it with `write(file)`; an existing name gets `~1`, `~2`...
    before its suffix.  Returns the path written.  A partly written file is removed; an OSError
    is an HloInputError naming WHAT and the path."""
    path = Path(path)
    stem, suffix, n = path.stem, path.suffix, 0
    while True:
        try:
            f = _create_excl(path)
            break
        except FileExistsError:
            n += 1
            path = path.with_name(f"{stem}~{n}{suffix}")
        except OSError as e:
            raise _write_error(what, path, e) from None
    _fill(f, path, write, what)
    return path


def _fill(f, path: Path, write, what: str):
    try:
        with f:
            write(f)
    except OSError as e:
        _unlink_quietly(path)
        raise _write_error(what, path, e) from None
    except BaseException:
        _unlink_quietly(path)
        raise


def replace_file(target: Path, write, what: str):
    """Write TARGET through a fresh temporary file next to it, renamed over it at the end: a
    reader never sees half a file, an existing TARGET (or a link at its place) is replaced, never
    written through, and no other file is touched.  An OSError is an HloInputError."""
    target = Path(target)
    f, tmp = _temp_beside(target, what)
    _fill(f, tmp, write, what)
    _rename_over(tmp, target, what)


def replace_file_by_name(target: Path, fill, what: str, parts: int = 0):
    """As replace_file, for a file written by its name, by this process or others (memory-mapped
    by the Ray actors: --output-global on Ray): FILL(tmp, part_paths) writes the temporary file TMP
    next to TARGET, which is then renamed over it; PARTS more temporary files next to it
    (part_paths, created empty) are removed at the end, whatever happens."""
    target = Path(target)
    made = []
    try:
        for _ in range(parts):
            f, p = _temp_beside(target, what)
            f.close()
            made.append(p)
        f, tmp = _temp_beside(target, what)
        f.close()
        made.append(tmp)
        try:
            fill(tmp, made[:-1])
        except OSError as e:
            raise _write_error(what, target, e) from None
        _rename_over(tmp, target, what)
        made.pop()
    finally:
        for p in made:
            _unlink_quietly(p)


def _temp_beside(target: Path, what: str):
    """(open file, path) of a new temporary file next to TARGET, which must be a file if it exists."""
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise HloInputError(f"{what}: {target} is {file_kind(mode)}; refusing to replace it")
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return _create_excl(tmp), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise _write_error(what, target, e) from None


def _rename_over(tmp: Path, target: Path, what: str):
    try:
        os.replace(tmp, target)
    except OSError as e:
        _unlink_quietly(tmp)
        raise _write_error(what, target, e) from None


def _unlink_quietly(path: Path):
    try:
        os.unlink(path)
    except OSError:
        pass


def storable(a):
    """ml_dtypes arrays (bfloat16, float8_*, int4, ...) are saved as raw records (|V2, |V1): NumPy
    cannot read their descriptors back; `hlo run --input` reads the records as the parameter's type."""
    try:
        builtin = np.dtype(a.dtype.str) == a.dtype
    except TypeError:
        builtin = False
    return a if builtin else a.view(np.dtype(f"V{a.dtype.itemsize}"))


def save_npy(f, a):
    np.save(f, storable(np.asarray(a)))


def new_npy(path, shape, dtype):
    """PATH made an .npy file of SHAPE and DTYPE (as `storable` saves it), its data left to be
    written in place (memory-mapped, by other processes: np.lib.format.open_memmap(path, "r+"))."""
    dt = storable(np.empty(0, dtype)).dtype
    m = np.lib.format.open_memmap(str(path), mode="w+", dtype=dt, shape=tuple(shape))
    del m


def npz_of_npy_files(f, members: dict, chunk: int = 1 << 22):
    """An .npz archive into the open file F, as np.savez writes one (stored, ZIP64), whose members
    (NAME -> an .npy file's path) are copied in pieces of CHUNK bytes: no member is ever held whole."""
    import shutil
    import zipfile
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, path in members.items():
            with open(path, "rb") as src, z.open(name + ".npy", "w", force_zip64=True) as dst:
                shutil.copyfileobj(src, dst, chunk)


def write_results(path: str, leaves, what: str = "--output"):
    """The results as OUT.npy (one array) or OUT.npz (keys out0, out1, ...), replacing OUT."""
    if path.endswith(".npy"):
        replace_file(Path(path), lambda f: save_npy(f, leaves[0]), f"{what} {path}")
    else:
        arrays = {f"out{k}": storable(np.asarray(v)) for k, v in enumerate(leaves)}
        replace_file(Path(path), lambda f: np.savez(f, **arrays), f"{what} {path}")


# ----------------------------------------------------------------------------- summaries

def is_intlike(a) -> bool:
    if a.dtype.kind in "iu":
        return True
    try:
        return bool(np.issubdtype(a.dtype, np.integer))
    except TypeError:
        return a.dtype.name.startswith(("int", "uint"))


def stats(a) -> dict:
    """Summary statistics of one array: shape, dtype, min/max/mean, NaN and Inf counts."""
    out = {"shape": list(a.shape), "dtype": str(a.dtype), "size": int(a.size)}
    if a.size == 0:
        return out
    kind = a.dtype.kind
    try:
        if kind == "b":
            t = int(np.count_nonzero(a))
            out.update(min=int(a.min()), max=int(a.max()), mean=t / a.size, true=t)
        elif is_intlike(a):
            w = a.astype(np.int64) if kind not in "iu" else a
            out.update(min=int(w.min()), max=int(w.max()), mean=float(w.astype(np.float64).mean()))
        elif kind == "c":
            c = a.astype(np.complex128)
            mag = np.abs(c)
            fin = np.isfinite(c)
            out.update(nan=int(np.isnan(c).sum()), inf=int((np.isinf(c.real) | np.isinf(c.imag)).sum()),
                       min_abs=float(mag[fin].min()) if fin.any() else None,
                       max_abs=float(mag[fin].max()) if fin.any() else None,
                       mean=[float(c[fin].mean().real), float(c[fin].mean().imag)] if fin.any() else None)
        else:
            f = a.astype(np.float64)
            fin = np.isfinite(f)
            out.update(nan=int(np.isnan(f).sum()), inf=int(np.isinf(f).sum()),
                       min=float(f[fin].min()) if fin.any() else None,
                       max=float(f[fin].max()) if fin.any() else None,
                       mean=float(f[fin].mean()) if fin.any() else None)
    except (TypeError, ValueError):
        pass
    return out


def number_text(x) -> str:
    """A statistic as the summaries show it: 6 significant digits, a complex one as [re, im]."""
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, list):
        return f"{x[0]:.4g}{x[1]:+.4g}j"
    return str(x)


def stats_text(s: dict) -> str:
    """`stats`' document in one line: `float32[2, 3] min=... max=... mean=... nan=... inf=...`."""
    keys = [k for k in ("min", "max", "mean", "nan", "inf") if s.get(k) is not None]
    return f"{s['dtype']}{s['shape']} " + " ".join(f"{k}={number_text(s[k])}" for k in keys)


def nonfinite_mask(a):
    """Boolean mask of NaN/Inf elements, or None for types that cannot hold them."""
    if a.dtype.kind in "biu" or a.size == 0 or is_intlike(a):
        return None
    try:
        return ~np.isfinite(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64))
    except (TypeError, ValueError):
        return None


def has_nonfinite(a) -> bool:
    m = nonfinite_mask(a)
    return m is not None and bool(m.any())


def scalar_str(x, a) -> str:
    """One element X of array A, compactly (5 significant digits)."""
    if a.dtype.kind == "b":
        return "true" if x else "false"
    if is_intlike(a):
        return str(int(x))
    if a.dtype.kind == "c":
        c = complex(x)
        return f"({c.real:.5g}{c.imag:+.5g}j)"
    return f"{float(np.float64(x)):.5g}"


def leaves_with_shapes(value, shape):
    """(array, array shape) leaves of a value, depth-first; tokens and opaque values left out."""
    from ..interpreter.values import TOKEN
    if shape.is_tuple:
        for v, s in zip(value, shape.tuple_shapes):
            yield from leaves_with_shapes(v, s)
    elif value is not TOKEN and value is not None and shape.element_type not in ("token", "opaque"):
        yield value, shape


def row_digest(a) -> bytes:
    """A digest of an array's bits (values alike bit for bit, and only they, share it)."""
    a = np.ascontiguousarray(a)
    return hashlib.blake2b(a.view(np.uint8).reshape(-1) if a.size else b"", digest_size=16).digest()


@dataclass(frozen=True)
class RowSummary:
    """One device's value of a result leaf summarized where it was computed, in place of the value
    (a run on Ray whose actors keep their results and write --output-global themselves): the
    digest of its bits, its statistics (stats) and its first elements, flattened (`head`)."""
    digest: bytes
    stats: dict
    head: np.ndarray
    size: int

    @property
    def dtype(self):
        return self.head.dtype


def summarize_row(a, n: int = 8) -> RowSummary:
    a = np.asarray(a)
    return RowSummary(row_digest(a), stats(a), np.array(a.reshape(-1)[:n]), int(a.size))


def value_stats(v) -> dict:
    """stats of a result value, or the statistics a RowSummary carries."""
    return v.stats if isinstance(v, RowSummary) else stats(np.asarray(v))


# ----------------------------------------------------------------------------- XLA's literal format

def literal_text(value, shape, oneline: bool = False) -> str:
    """An array value as XLA's Literal::ToString prints it (ToStringOneline with ONELINE): the
    shape, then nested braces; from rank 2 on, each innermost row on its own line, indented by
    two spaces, and every outer level's braces on lines of their own (from rank 4, an outer
    brace names its index as `/*iK=N*/`).  pred arrays print as 0/1."""
    from ..ir.literal import ELEMENT_TYPES, format_scalar
    arr = np.asarray(value)
    et = ELEMENT_TYPES[shape.element_type]
    head = shape.to_str(False)
    if shape.is_dynamic:
        head += "(" + ",".join(str(d) for d in arr.shape) + ")"
    rank = arr.ndim
    if rank == 0:
        return f"{head} {format_scalar(arr.reshape(()) if et.kind == 'float' else arr.item(), et)}"
    flat = arr.reshape(-1)
    items = [format_scalar(x if et.kind == "float" else x.item(), et, True) for x in flat]
    br = " " if oneline else "\n"
    dims = arr.shape
    out: list[str] = []
    pos = 0

    def level(d: int, index: list[int]):
        nonlocal pos
        n = dims[d]
        left = len(dims) - d
        if rank == 1:
            open_, close = "{", "}"
        elif left == 1:
            open_ = ("" if oneline else "  ") + "{" + ("" if n <= 1 else " ")
            close = ("" if n <= 1 else " ") + "}"
        else:
            open_ = "{" + (f" /*i{len(index) - 1}={index[-1]}*/" + (br if n > 0 else "")
                           if rank > 3 and index else br)
            close = br + "}"
        out.append(open_)
        for i in range(n):
            if left == 1:
                out.append(items[pos])
                pos += 1
            else:
                level(d + 1, index + [i])
            if i < n - 1:
                out.append("," + (br if left > 1 else " "))
        out.append(close)

    level(0, [])
    return f"{head} {''.join(out)}"


def flatten_arrays(value) -> list:
    """The arrays of VALUE (an array, a scalar, or nested tuples and lists of them), depth-first;
    tokens (and anything else that is not a number) left out."""
    if isinstance(value, (tuple, list)):
        out = []
        for v in value:
            out.extend(flatten_arrays(v))
        return out
    if value is None or not isinstance(value, (np.ndarray, np.generic, int, float, bool, complex)):
        return []                                   # a token
    return [np.asarray(value)]
