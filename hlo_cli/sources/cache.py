"""An on-disk cache of parsed modules, keyed by the HLO text.

`cached_parse(text, name)` returns what `hlo_cli.parser.parse(text, name)`
returns; on a repeat it loads the module from ``cache_dir()`` instead of
parsing again, which for a large dump is many times faster (the README's section on the
parse cache has figures).

Where: ``$HLO_CACHE_DIR`` if set (empty, ``off``, ``0``, ``false``, ``no`` or
``none`` switch the cache off), else ``$XDG_CACHE_HOME/hlo``, else
``~/.cache/hlo``.

The key is a SHA-256 of the text, the name (it is recorded in every location),
the tool version, the Python and NumPy versions, and a fingerprint of the
grammar and of the sources under hlo_cli/ir and hlo_cli/parser (and of this
file), so that any change to the parser or the IR invalidates old entries.

An entry is one file ``<key>.hlc``: a fixed header (magic, format version,
key, payload length, SHA-256 of the payload) followed by a pickle (protocol 5)
of the Module.  The pickle uses compact reductions for the IR classes (a
computation's instructions are rows of plain tuples, written by the C pickler
and rebuilt by one list comprehension, strings that repeat are stored once);
the instructions of consecutive computations (~2048 at a time) are a pickle of
their own, decoded on the first read of one of them (a command that reads a few
computations builds only those and their chunks' neighbours; the whole entry's
checksum is verified before anything is decoded), and it is read back by an
unpickler that only accepts the IR classes, so a planted file cannot run code.  Files are written to a temporary
file in the same directory, fsynced and renamed over the entry, so readers
only ever see complete entries and concurrent writers of the same key are
harmless.  A file that is truncated, corrupt, foreign, from another format
version, owned by another user, or that does not unpickle to a Module is a
miss and is deleted.  Errors of the cache itself never propagate: if the
directory cannot be created or written, the module is parsed and returned as
usual.  The size is bounded (``MAX_BYTES`` / ``MAX_ENTRIES``, overridable by
``$HLO_CACHE_MAX_BYTES`` / ``$HLO_CACHE_MAX_ENTRIES``); the least recently
used entries (by mtime, which a hit refreshes) are evicted after each store.
Errors of the parser (HloSyntaxError, ...) propagate unchanged and are never
cached.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from ..ir import serial
from ..ir.gcpause import NoGC as _NoGC

__all__ = ["cache_dir", "cached_parse", "cached_proto", "clear_cache", "cache_info", "CacheInfo",
           "MAX_BYTES", "MAX_ENTRIES", "FORMAT_VERSION"]

_log = logging.getLogger("hlo.cache")

MAX_BYTES = 1 << 30          # 1 GiB
MAX_ENTRIES = 256
FORMAT_VERSION = 3           # 2: the module's computations decoded lazily (ir/serial.py); 3: their
                             # instructions stored as rows of plain tuples

_MAGIC = b"HLOIRPK\x00"
_HEADER = struct.Struct("<8sI32sQ32s")   # magic, format version, key, payload length, payload sha256
_SUFFIX = ".hlc"
_TMP_PREFIX = ".tmp-"
_TMP_SUFFIX = ".part"
_STALE_TMP_SECONDS = 3600
_OFF = frozenset({"", "off", "0", "false", "no", "none"})


# ----------------------------------------------------------------------------- location and limits

def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is switched off (``HLO_CACHE_DIR=off``)."""
    env = os.environ.get("HLO_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):          # the XDG spec says to ignore relative paths
        return Path(xdg) / "hlo"
    try:
        return Path.home() / ".cache" / "hlo"
    except (RuntimeError, KeyError, OSError):   # no home directory to be found
        return None


def _limit(env: str, default: int) -> int:
    v = os.environ.get(env)
    if v:
        try:
            n = int(v)
            if n >= 0:
                return n
        except ValueError:
            pass
    return default


def _max_bytes() -> int:
    return _limit("HLO_CACHE_MAX_BYTES", MAX_BYTES)


def _max_entries() -> int:
    return _limit("HLO_CACHE_MAX_ENTRIES", MAX_ENTRIES)


# ----------------------------------------------------------------------------- key

_fingerprint: bytes | None = None


def _code_fingerprint() -> bytes:
    """A hash of the grammar and of the parser/IR sources (and of this file): any edit invalidates."""
    global _fingerprint
    if _fingerprint is None:
        h = hashlib.sha256()
        pkg = Path(__file__).resolve().parent.parent
        files: list[tuple[str, Path]] = [("sources/cache.py", Path(__file__).resolve())]
        for sub in ("ir", "parser"):
            d = pkg / sub
            if d.is_dir():
                files.extend((f"{sub}/{p.relative_to(d).as_posix()}", p) for p in d.rglob("*.py")
                             if "__pycache__" not in p.parts)
        try:
            from ..parser.grammar import grammar_path
            files.append(("grammar/hlo.lark", grammar_path()))
        except Exception:           # no grammar: parsing fails anyway; key on its absence
            h.update(b"no grammar\0")
        for rel, p in sorted(files):
            try:
                data = p.read_bytes()
            except OSError:
                data = b"\xff unreadable"
            h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little"))
            h.update(data)
        _fingerprint = h.digest()
    return _fingerprint


def _tool_version() -> str:
    from .. import version
    return str(getattr(version, "__version__", "0"))


_numpy_version: str | None = None


def _environment() -> bytes:
    global _numpy_version
    if _numpy_version is None:
        _numpy_version = _installed_numpy()
    return "\0".join((f"format={FORMAT_VERSION}", f"hlo={_tool_version()}",
                      f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
                      f"numpy={_numpy_version}", sys.byteorder)).encode()


def _installed_numpy() -> str:
    """The installed NumPy's version, read without importing NumPy (a cached `hlo check` needs no
    NumPy) nor importlib.metadata (slower to import than the whole cached command): its
    numpy/version.py, else the distribution's metadata."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("numpy")
        if spec is not None and spec.origin:
            text = (Path(spec.origin).parent / "version.py").read_text()
            m = re.search(r"""^(?:full_)?version\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", text, re.M)
            if m:
                return m.group(1)
    except (OSError, ImportError, ValueError):
        pass
    try:
        from importlib.metadata import version
        return version("numpy")
    except Exception:           # pragma: no cover - numpy is a dependency
        return "-"


def _key(text: str, name: str) -> bytes:
    h = hashlib.sha256(b"hlo parse cache\0")
    h.update(_environment() + b"\0")
    h.update(_code_fingerprint())
    nb = name.encode("utf-8", "surrogatepass")
    h.update(len(nb).to_bytes(8, "little") + nb)
    h.update(_text_digest(text))
    return h.digest()


_last_text: list = [None, b""]      # the text last hashed and its digest


def _text_digest(text: str) -> bytes:
    """SHA-256 of the text (with its length), kept for the text last asked: a command asks it for
    the module's key and again for each derived result's key (hashing a large dump takes a while)."""
    if _last_text[0] is not text:
        tb = text.encode("utf-8", "surrogatepass")
        h = hashlib.sha256(len(tb).to_bytes(8, "little"))
        h.update(tb)
        _last_text[:] = [text, h.digest()]
    return _last_text[1]


def _entry_path(directory: Path, key: bytes) -> Path:
    return directory / (key.hex() + _SUFFIX)


# ----------------------------------------------------------------------------- load / store

def _owned_by_us(st) -> bool:
    geteuid = getattr(os, "geteuid", None)
    return geteuid is None or st.st_uid == geteuid()


def _discard(path: Path, st) -> None:
    """Delete a bad entry, unless it was replaced by another writer meanwhile."""
    try:
        now = os.stat(path)
        if st is None or (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
            os.unlink(path)
    except OSError:
        pass


def _load(path: Path, key: bytes):
    """The cached Module, or None (a miss); never raises."""
    st = None
    try:
        # O_NONBLOCK: a FIFO planted at the entry's path must not hang us (no effect on files)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        f = open(fd, "rb")
    except Exception:           # pragma: no cover - defensive
        os.close(fd)
        return None
    try:
        with f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _owned_by_us(st):
                _log.debug("%s: not a regular file of ours; ignored", path)
                return None
            data = f.read()
    except OSError:
        return None
    try:
        module = _decode(data, key)
    except Exception as e:      # truncated, corrupt, foreign, stale: all misses
        _log.debug("%s: bad cache entry (%s); deleted", path, e)
        _discard(path, st)
        return None
    try:
        os.utime(path)          # least recently *used* is evicted first
    except OSError:
        pass
    return module


class _BadEntry(Exception):
    pass


def _decode(data: bytes, key: bytes):
    if len(data) < _HEADER.size:
        raise _BadEntry("shorter than the header")
    magic, version, stored_key, length, digest = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise _BadEntry("not a cache entry")
    if version != FORMAT_VERSION:
        raise _BadEntry(f"format version {version}")
    if stored_key != key:
        raise _BadEntry("another key")
    if length != len(data) - _HEADER.size:
        raise _BadEntry("truncated or padded")
    if hashlib.sha256(memoryview(data)[_HEADER.size:]).digest() != digest:
        raise _BadEntry("checksum mismatch")
    with _NoGC(promote=True):
        return serial.load(data, _HEADER.size)


def _encode(module, key: bytes) -> tuple[bytes, memoryview]:
    with _NoGC():
        buf = serial.dump(module)
    payload = buf.getbuffer()
    header = _HEADER.pack(_MAGIC, FORMAT_VERSION, key, len(payload), hashlib.sha256(payload).digest())
    return header, payload


def _write_atomically(directory: Path, path: Path, chunks) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _store(directory: Path, path: Path, key: bytes, module) -> bool:
    """Write the entry; False if the module could not be cached.  Never raises (but Ctrl-C)."""
    try:
        header, payload = _encode(module, key)
        if len(header) + len(payload) > _max_bytes():
            return False
        _write_atomically(directory, path, (header, payload))
    except Exception as e:
        _log.debug("not caching %s: %s", path, e)
        return False
    try:
        _evict(directory, keep=path)
    except Exception as e:      # pragma: no cover - eviction is best effort
        _log.debug("eviction in %s failed: %s", directory, e)
    return True


def _scan(directory: Path, clean: bool = False):
    """[(mtime_ns, size, path)] of the entries; with `clean`, removes old temporary files (crashed
    writers)."""
    out = []
    now = time.time()
    with os.scandir(directory) as it:
        for de in it:
            name = de.name
            try:
                if name.endswith(_SUFFIX) and not name.startswith("."):
                    st = de.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        out.append((st.st_mtime_ns, st.st_size, de.path))
                elif clean and name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX):
                    st = de.stat(follow_symlinks=False)
                    if now - st.st_mtime > _STALE_TMP_SECONDS:
                        os.unlink(de.path)
            except OSError:
                continue
    return out


def _evict(directory: Path, keep: Path | None = None) -> int:
    """Delete least recently used entries until the bounds hold; returns how many were deleted."""
    max_bytes, max_entries = _max_bytes(), _max_entries()
    entries = _scan(directory, clean=True)
    total = sum(e[1] for e in entries)
    count = len(entries)
    if total <= max_bytes and count <= max_entries:
        return 0
    keep_s = str(keep) if keep is not None else None
    removed = 0
    for _, size, p in sorted(entries):
        if total <= max_bytes and count <= max_entries:
            break
        if p == keep_s:
            continue
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass                # someone else evicted it
        except OSError:
            continue
        total -= size
        count -= 1
        removed += 1
    return removed


# ----------------------------------------------------------------------------- entry points

def _parse(text: str, name: str):
    from ..parser import parse
    return parse(text, name)


def cached_parse(text: str, name: str):
    """`parse(text, name)`, through the on-disk cache.  Parse errors propagate and are not cached."""
    directory = cache_dir()
    if directory is None:
        return _parse(text, name)
    try:
        key = _key(text, name)
    except Exception as e:      # pragma: no cover - defensive: the cache must never break parsing
        _log.debug("no cache key: %s", e)
        return _parse(text, name)
    path = _entry_path(directory, key)
    module = _load(path, key)
    if module is not None:
        return module
    module = _parse(text, name)
    _store(directory, path, key, module)
    return module


def store_module(text: str, name: str, module) -> bool:
    """Keep `module`, parsed from `text` elsewhere (`hlo check` on two cores joins its parts), as
    cached_parse would have kept it; False when the cache is off or the module was not stored.
    Never raises (but Ctrl-C)."""
    directory = cache_dir()
    if directory is None:
        return False
    try:
        key = _key(text, name)
    except Exception as e:      # noqa: BLE001 -- the cache must never break checking
        _log.debug("no cache key: %s", e)
        return False
    return _store(directory, _entry_path(directory, key), key, module)


def holds_module(text: str, name: str) -> bool:
    """Whether the cache has an entry for `text` (a look at the directory, nothing loaded): `hlo
    check`, which can parse a large text on two cores without caching it, takes the cached module
    instead when there is one (loading it is faster)."""
    directory = cache_dir()
    if directory is None:
        return False
    try:
        return _entry_path(directory, _key(text, name)).is_file()
    except Exception:       # noqa: BLE001 -- the cache must never break checking
        return False


class CacheInfo(NamedTuple):
    directory: Path | None      # None: the cache is off
    entries: int
    bytes: int
    max_entries: int
    max_bytes: int


def cache_info(directory: Path | str | None = None) -> CacheInfo:
    """How many entries the cache holds and their total size."""
    d = Path(directory) if directory is not None else cache_dir()
    entries: list = []
    if d is not None:
        try:
            entries = _scan(d)
        except OSError:
            entries = []
    return CacheInfo(d, len(entries), sum(e[1] for e in entries), _max_entries(), _max_bytes())


def clear_cache(directory: Path | str | None = None) -> int:
    """Delete every entry (only the cache's own files); returns how many entries were deleted."""
    d = Path(directory) if directory is not None else cache_dir()
    if d is None:
        return 0
    removed = 0
    try:
        with os.scandir(d) as it:
            for de in it:
                name = de.name
                ours = (name.endswith(_SUFFIX) and not name.startswith(".")) or (
                    name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX))
                if not ours or de.is_dir(follow_symlinks=False):
                    continue
                try:
                    os.unlink(de.path)
                    if name.endswith(_SUFFIX):
                        removed += 1
                except OSError:
                    pass
    except OSError:
        pass
    return removed


# ----------------------------------------------------------------------------- derived results
#
# What a command computes from the text alone (`hlo check`'s diagnostics...) is cached beside the
# module, as JSON (no code runs on loading it), in an entry of the same form (header, checksum,
# owner, atomic writes, the same bound and eviction), under the magic _DERIVED_MAGIC and a key
# that also covers `what` (the command and its options) and a fingerprint of every source file of
# the package (any change to a rule may change a result; by os.stat, _all_sources_fingerprint).  A repeat then needs neither the
# module nor the work.

_DERIVED_MAGIC = b"HLOJSON\x00"
_package_fingerprint: bytes | None = None


def _all_sources_fingerprint() -> bytes:
    """The parser's fingerprint and every source file of the package by identity: its path, size,
    modification time and inode (an edit, a reinstall or a checkout changes one), read from the
    directories without opening the files -- hashing their contents cost a cached `hlo run` about
    10 ms on each start."""
    global _package_fingerprint
    if _package_fingerprint is None:
        _package_fingerprint = hashlib.sha256(
            _code_fingerprint() + sources_identity(Path(__file__).resolve().parent.parent)).digest()
    return _package_fingerprint


def sources_fingerprint() -> bytes:
    """The fingerprint of hlo's sources that keys derived results (computed once per process):
    what else depends on the code and not on a module keys itself on it too."""
    return _all_sources_fingerprint()


def sources_identity(directory) -> bytes:
    """A SHA-256 of `directory`'s path and of each .py file under it (os.stat: path, size,
    modification time, inode, device)."""
    top = os.path.join(os.fsencode(directory), b"")
    h = hashlib.sha256(top + b"\0")
    for rel, st in sorted(_source_stats(top, b"")):
        h.update(rel + b"\0" + struct.pack("<4q", st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev))
    return h.digest()


def _source_stats(top: bytes, rel: bytes) -> list:
    """(path relative to `top` (ending in a separator), os.stat) of each .py file under `top` +
    `rel`, __pycache__ left out; an unreadable directory or file counts as absent."""
    out: list = []
    try:
        with os.scandir(top + rel) as entries:
            for e in entries:
                name = rel + e.name
                try:
                    if e.is_dir():
                        if e.name != b"__pycache__":
                            out.extend(_source_stats(top, name + b"/"))
                    elif e.name.endswith(b".py"):
                        out.append((name, e.stat()))
                except OSError:
                    continue
    except OSError:
        pass
    return out


def _derived_key(text: str, name: str, what: str) -> bytes:
    h = hashlib.sha256(b"hlo derived result\0")
    h.update(_key(text, name))
    h.update(_all_sources_fingerprint())
    h.update(what.encode("utf-8", "surrogatepass"))
    return h.digest()


def _derived_entry(text: str, name: str, what: str):
    """(key, entry path) of a derived result, or None when the cache is off."""
    directory = cache_dir()
    if directory is None:
        return None
    key = _derived_key(text, name, what)
    return key, _entry_path(directory, key)


def _load_tagged(path: Path, key: bytes, magic: bytes, decode):
    """decode(data, offset of the payload) of the entry at PATH written under MAGIC and KEY, or None
    (a miss; a bad entry is deleted); never raises."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    st = None
    try:
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _owned_by_us(st):
                return None
            data = f.read()
        stored_magic, version, stored_key, length, digest = _HEADER.unpack_from(data)
        if (stored_magic != magic or version != FORMAT_VERSION or stored_key != key
                or length != len(data) - _HEADER.size
                or hashlib.sha256(memoryview(data)[_HEADER.size:]).digest() != digest):
            raise _BadEntry(f"not a {magic!r} entry of this key")
        value = decode(data, _HEADER.size)
    except Exception as e:      # truncated, corrupt, foreign: a miss
        _log.debug("%s: bad entry (%s)", path, e)
        if st is not None:
            _discard(path, st)
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return value


def _json_payload(data: bytes, offset: int):
    import json
    return json.loads(bytes(memoryview(data)[offset:]).decode("utf-8"))


def load_derived(text: str, name: str, what: str):
    """The JSON value stored by store_derived for (text, name, what), or None; never raises."""
    try:
        entry = _derived_entry(text, name, what)
    except (OSError, ValueError):
        return None
    if entry is None:
        return None
    key, path = entry
    return _load_tagged(path, key, _DERIVED_MAGIC, _json_payload)


def _store_tagged(path: Path, key: bytes, magic: bytes, payload: bytes) -> bool:
    """Write PAYLOAD under MAGIC and KEY at PATH (atomically, then evict); False if it is over the
    bound.  Raises what writing raises."""
    if _HEADER.size + len(payload) > _max_bytes():
        return False
    header = _HEADER.pack(magic, FORMAT_VERSION, key, len(payload), hashlib.sha256(payload).digest())
    _write_atomically(path.parent, path, (header, payload))
    _evict(path.parent, keep=path)
    return True


def store_derived(text: str, name: str, what: str, value) -> bool:
    """Store the JSON-able `value` for (text, name, what); False if it could not be.  Never raises."""
    try:
        import json
        entry = _derived_entry(text, name, what)
        if entry is None:
            return False
        key, path = entry
        return _store_tagged(path, key, _DERIVED_MAGIC, json.dumps(value, separators=(",", ":")).encode("utf-8"))
    except Exception as e:
        _log.debug("not caching a derived result: %s", e)
        return False


# ----------------------------------------------------------------------------- decoded module protos
#
# A module proto is decoded straight into the IR, and printed for its text (diagnostics' source lines,
# the derived results' key); a repeat of the same bytes reads both back from one entry (magic
# _PROTO_MAGIC, the same header, checksum, owner check, atomic write, bound and eviction): the payload
# is the length (8 bytes) of a JSON list of strings (the text, and what else the reader keeps: the
# module's own name), that list, then the module as the parse cache pickles it.  The
# key covers the bytes, the file name (every location names it), the module's config and every source
# file of the package (the decoder lives in sources/, outside the parse cache's fingerprint).

_PROTO_MAGIC = b"HLOPROTO"


def _proto_key(data: bytes, name: str, config: bytes) -> bytes:
    h = hashlib.sha256(b"hlo decoded proto\0")
    h.update(_environment() + b"\0")
    h.update(_all_sources_fingerprint())
    for part in (name.encode("utf-8", "surrogatepass"), config, data):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def _proto_payload(data: bytes, offset: int):
    """(module, strings) of a decoded-proto entry's payload."""
    import json
    n = int.from_bytes(data[offset:offset + 8], "little")
    start = offset + 8
    strings = json.loads(bytes(memoryview(data)[start:start + n]).decode("utf-8"))
    if not isinstance(strings, list):
        raise _BadEntry("not a list of strings")
    with _NoGC(promote=True):
        module = serial.load(data, start + n)
    return module, strings


def _store_proto(path: Path, key: bytes, module, strings: list) -> None:
    try:
        import json
        with _NoGC():
            buf = serial.dump(module)
        tb = json.dumps(strings).encode("utf-8")
        _store_tagged(path, key, _PROTO_MAGIC, len(tb).to_bytes(8, "little") + tb + buf.getbuffer())
    except Exception as e:
        _log.debug("not caching a decoded proto: %s", e)


def cached_proto(data: bytes, name: str, config: bytes, decode, use_cache: bool = True):
    """`decode()` -> (module, [strings]) of a module proto's bytes DATA (file name NAME, its config's
    bytes CONFIG; the strings: its text and what else the reader keeps), through the on-disk cache: a
    repeat of the same bytes loads both instead of decoding.  Errors of `decode` propagate and are
    not cached."""
    directory = cache_dir() if use_cache else None
    if directory is None:
        return decode()
    try:
        key = _proto_key(data, name, config)
    except Exception as e:      # pragma: no cover - defensive: the cache must never break reading
        _log.debug("no proto cache key: %s", e)
        return decode()
    path = _entry_path(directory, key)
    hit = _load_tagged(path, key, _PROTO_MAGIC, _proto_payload)
    if hit is not None:
        return hit
    module, strings = decode()
    _store_proto(path, key, module, list(strings))
    return module, list(strings)
