"""The on-disk parse cache (hlo_cli/sources/cache.py): hits, misses, damaged entries, concurrency, bounds."""
from __future__ import annotations

import dataclasses
import gc
import hashlib
import multiprocessing
import os
import pickle
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import hlo_cli
from hlo_cli.ir import serial
from hlo_cli.sources import cache
from hlo_cli.errors import HloSyntaxError
from hlo_cli.ir.module import Computation, Module
from hlo_cli.ir.serial import LazyComputation
from hlo_cli.parser import parse

ROOT = Path(__file__).resolve().parent.parent
JAX = ROOT / "samples" / "jax"
SMALL = ["cond_switch.hlo", "cnn.hlo", "scan_loop.hlo", "fori_loop.hlo", "attention.hlo", "mlp_train_step.hlo"]


def sample(name: str) -> tuple[str, str]:
    path = JAX / name
    return path.read_text(), str(path)


# ----------------------------------------------------------------------------- helpers

def assert_same(a, b, where="module"):
    """Structural identity, stricter than ==: types, every field (compare=False ones too: locations,
    operand shapes, source), attribute order, array dtypes, str subclasses' extra attributes.  A
    computation read from the cache is a LazyComputation (its instructions decoded on first read):
    the same as a Computation for this comparison."""
    assert _kind(a) is _kind(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
        assert a.flags.writeable == b.flags.writeable, where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, float):
        assert repr(a) == repr(b), where
    else:
        assert a == b, where
        if isinstance(a, str) and hasattr(a, "__dict__"):
            assert vars(a) == vars(b), where          # Quoted.raw


def _kind(x):
    return Computation if type(x) is LazyComputation else type(x)


def entries(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.suffix == ".hlc")


@pytest.fixture()
def cdir(monkeypatch, tmp_path) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("HLO_CACHE_DIR", str(d))
    monkeypatch.delenv("HLO_CACHE_MAX_BYTES", raising=False)
    monkeypatch.delenv("HLO_CACHE_MAX_ENTRIES", raising=False)
    return d


@pytest.fixture()
def parses(monkeypatch) -> list:
    """Records the calls of the real parser made by the cache (a miss parses, a hit does not)."""
    calls = []
    real = cache._parse

    def counting(text, name):
        calls.append(name)
        return real(text, name)
    monkeypatch.setattr(cache, "_parse", counting)
    return calls


def entry_for(d: Path, text: str, name: str) -> Path:
    return d / (cache._key(text, name).hex() + ".hlc")


def write_entry(path: Path, key: bytes, payload: bytes, *, magic=cache._MAGIC, version=cache.FORMAT_VERSION):
    header = cache._HEADER.pack(magic, version, key, len(payload), hashlib.sha256(payload).digest())
    path.write_bytes(header + payload)


# ----------------------------------------------------------------------------- hits and misses

def test_miss_then_hit_returns_the_same_module(cdir, parses):
    text, name = sample("cnn.hlo")
    m1 = cache.cached_parse(text, name)
    assert parses == [name]
    assert len(entries(cdir)) == 1
    m2 = cache.cached_parse(text, name)
    assert parses == [name]                      # a hit: not parsed again
    assert isinstance(m2, Module) and m2 == m1
    assert_same(m1, m2)
    assert_same(parse(text, name), m2)


def roundtrip_dirs():
    return [ROOT / "samples" / d for d in ("jax", "syntax", "ops")]


@pytest.mark.parametrize("directory", roundtrip_dirs(), ids=lambda p: p.name)
def test_every_sample_round_trips(cdir, directory):
    """Every kind of attribute value the samples have is stored and loaded back exactly (no file is
    left uncacheable by an unexpected type)."""
    files = sorted(directory.glob("*.hlo"))
    assert files
    cached = 0
    for path in files:
        text = path.read_text()
        try:
            expected = parse(text, str(path))
        except hlo_cli.HloError:
            continue
        key = cache._key(text, str(path))
        entry = cache._entry_path(cdir, key)
        assert cache._store(cdir, entry, key, expected), path
        loaded = cache._load(entry, key)
        assert loaded is not None, path
        assert_same(expected, loaded, path.name)
        cached += 1
    assert cached


def test_constants_come_back_as_arrays(cdir):
    text, name = sample("rng.opt.hlo")
    m1 = cache.cached_parse(text, name)
    m2 = cache.cached_parse(text, name)
    lits = [(i1.literal, i2.literal) for (_, i1), (_, i2) in zip(m1.instructions(), m2.instructions())
            if i1.literal is not None]
    assert lits
    for a, b in lits:
        assert_same(a, b)


def test_changed_text_or_name_misses(cdir, parses):
    text, name = sample("scan_loop.hlo")
    cache.cached_parse(text, name)
    cache.cached_parse(text + "\n", name)
    assert len(parses) == 2
    other = cache.cached_parse(text, "elsewhere.hlo")
    assert len(parses) == 3
    assert other.source == "elsewhere.hlo"
    assert all(i.loc.file == "elsewhere.hlo" for _, i in other.instructions())
    assert len(entries(cdir)) == 3
    cache.cached_parse(text, name)
    assert len(parses) == 3


def test_tool_version_and_code_changes_miss(cdir, parses, monkeypatch):
    text, name = sample("cond_switch.hlo")
    cache.cached_parse(text, name)
    from hlo_cli import version
    monkeypatch.setattr(version, "__version__", "999.0")
    cache.cached_parse(text, name)
    assert len(parses) == 2
    monkeypatch.setattr(cache, "_fingerprint", b"\x00" * 32)      # as if ir/ or parser/ had changed
    cache.cached_parse(text, name)
    assert len(parses) == 3
    cache.cached_parse(text, name)
    assert len(parses) == 3


def test_fingerprint_covers_grammar_and_sources(monkeypatch, tmp_path):
    monkeypatch.setattr(cache, "_fingerprint", None)
    base = cache._code_fingerprint()
    grammar = tmp_path / "hlo.lark"
    from hlo_cli.parser import grammar as source
    grammar.write_bytes(source.grammar_path().read_bytes() + b"\n// changed\n")
    monkeypatch.setattr(cache, "_fingerprint", None)
    monkeypatch.setattr(source, "grammar_path", lambda: grammar)
    assert cache._code_fingerprint() != base


def test_parse_file_uses_the_cache(cdir, parses, tmp_path):
    src = tmp_path / "m.hlo"
    src.write_text(sample("fori_loop.hlo")[0])
    m1 = hlo_cli.parse_file(str(src))
    m2 = hlo_cli.parse_file(str(src))
    assert parses == [str(src)]
    assert_same(m1, m2)
    hlo_cli.parse_file(str(src), use_cache=False)
    assert parses == [str(src)]


def test_gc_state_is_restored(cdir):
    text, name = sample("cnn.hlo")
    cache.cached_parse(text, name)
    assert gc.isenabled()
    cache.cached_parse(text, name)                   # a hit
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        cache.cached_parse(text, name)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_objects_frozen_by_the_program_stay_frozen(cdir):
    text, name = sample("cnn.hlo")
    cache.cached_parse(text, name)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        m = cache.cached_parse(text, name)           # a hit: must not unfreeze the program's objects
        assert gc.get_freeze_count() == frozen and gc.isenabled()
        assert m == parse(text, name)
    finally:
        gc.unfreeze()


# ----------------------------------------------------------------------------- switched off

@pytest.mark.parametrize("value", ["off", "OFF", "0", "", "  ", "false", "none"])
def test_cache_can_be_switched_off(monkeypatch, tmp_path, parses, value):
    monkeypatch.setenv("HLO_CACHE_DIR", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() is None
    text, name = sample("cond_switch.hlo")
    m1 = cache.cached_parse(text, name)
    m2 = cache.cached_parse(text, name)
    assert m1 == m2 and len(parses) == 2
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()
    assert cache.cache_info().entries == 0 and cache.cache_info().directory is None
    assert cache.clear_cache() == 0


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("HLO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "hlo"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "hlo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "hlo"
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache.cache_dir() == tmp_path / "explicit"
    monkeypatch.setenv("HLO_CACHE_DIR", "~/c")
    assert cache.cache_dir() == tmp_path / "home" / "c"


# ----------------------------------------------------------------------------- parse errors

def test_syntax_error_is_not_cached_and_still_raises(cdir, parses):
    text, name = sample("cnn.hlo")
    bad = text.replace("ENTRY", "ENTRY ENTRY", 1)
    with pytest.raises(HloSyntaxError) as direct:
        parse(bad, name)
    for attempt in (1, 2):
        with pytest.raises(HloSyntaxError) as e:
            cache.cached_parse(bad, name)
        assert str(e.value) == str(direct.value)
        assert [d.format() for d in e.value.diagnostics] == [d.format() for d in direct.value.diagnostics]
        assert len(parses) == attempt
    assert not cdir.exists() or entries(cdir) == []


def test_empty_text_raises_like_parse(cdir):
    with pytest.raises(HloSyntaxError):
        cache.cached_parse("  \n", "empty.hlo")
    assert not cdir.exists() or entries(cdir) == []


# ----------------------------------------------------------------------------- damaged entries

def _garbage(p: Path, data: bytes, key: bytes):
    p.write_bytes(os.urandom(4096))


def _empty(p, data, key):
    p.write_bytes(b"")


def _header_only_part(p, data, key):
    p.write_bytes(data[:20])


def _truncated(p, data, key):
    p.write_bytes(data[: len(data) // 2])


def _truncated_by_one(p, data, key):
    p.write_bytes(data[:-1])


def _trailing_bytes(p, data, key):
    p.write_bytes(data + b"\0")


def _flipped_payload_byte(p, data, key):
    b = bytearray(data)
    b[len(b) * 2 // 3] ^= 0x40
    p.write_bytes(bytes(b))


def _foreign_magic(p, data, key):
    p.write_bytes(b"NOTHLO!!" + data[8:])


def _other_format_version(p, data, key):
    write_entry(p, key, data[cache._HEADER.size:], version=cache.FORMAT_VERSION + 1)


def _other_key(p, data, key):
    write_entry(p, hashlib.sha256(b"another").digest(), data[cache._HEADER.size:])


def _not_a_module(p, data, key):
    write_entry(p, key, pickle.dumps({"name": "module"}, protocol=5))


def _not_a_pickle(p, data, key):
    write_entry(p, key, b"this is not a pickle at all")


def _foreign_global(p, data, key):
    # a well-formed pickle whose globals are not the IR's
    import collections
    write_entry(p, key, pickle.dumps(collections.OrderedDict(a=1), protocol=5))


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


DAMAGE = [_garbage, _empty, _header_only_part, _truncated, _truncated_by_one, _trailing_bytes,
          _flipped_payload_byte, _foreign_magic, _other_format_version, _other_key, _not_a_module,
          _not_a_pickle, _foreign_global]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_damaged_entry_is_a_miss_and_is_replaced(cdir, parses, damage):
    text, name = sample("attention.hlo")
    expected = cache.cached_parse(text, name)
    (path,) = entries(cdir)
    key = cache._key(text, name)
    damage(path, path.read_bytes(), key)
    m = cache.cached_parse(text, name)
    assert len(parses) == 2                      # a miss
    assert_same(expected, m)
    (again,) = entries(cdir)                     # replaced by a good entry
    assert again == path
    m = cache.cached_parse(text, name)
    assert len(parses) == 2                      # ... which now hits
    assert_same(expected, m)


@pytest.mark.parametrize("damage", [_garbage, _truncated, _flipped_payload_byte, _not_a_module],
                         ids=lambda f: f.__name__.strip("_"))
def test_damaged_entry_is_deleted(cdir, damage):
    text, name = sample("attention.hlo")
    cache.cached_parse(text, name)
    (path,) = entries(cdir)
    key = cache._key(text, name)
    damage(path, path.read_bytes(), key)
    assert cache._load(path, key) is None
    assert not path.exists()


def test_a_planted_pickle_cannot_run_code(cdir, parses, tmp_path):
    text, name = sample("cnn.hlo")
    key = cache._key(text, name)
    marker = tmp_path / "pwned"
    cdir.mkdir(parents=True)
    write_entry(entry_for(cdir, text, name), key, pickle.dumps(_Evil(str(marker)), protocol=5))
    m = cache.cached_parse(text, name)
    assert not marker.exists()
    assert len(parses) == 1 and m == parse(text, name)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_an_entry_does_not_hang(cdir, parses):
    text, name = sample("cnn.hlo")
    cdir.mkdir()
    os.mkfifo(entry_for(cdir, text, name))
    assert cache.cached_parse(text, name) == parse(text, name)
    assert len(parses) == 1


def test_unpickler_accepts_only_the_ir(cdir):
    import collections
    with pytest.raises(pickle.UnpicklingError):
        serial._codec().loads(pickle.dumps(collections.Counter("abc"), protocol=5), 0)
    with pytest.raises(pickle.UnpicklingError):
        serial._codec().loads(pickle.dumps(_Evil("/nonexistent/never"), protocol=5), 0)
    with pytest.raises(pickle.UnpicklingError):
        serial._restore_slots(Module, ("name",), ("x",))          # only for classes that need it
    with pytest.raises(ValueError):
        serial._mk_array("f32", (10 ** 12,), bytearray())         # size and bytes must agree


def test_entry_of_another_user_is_not_trusted(cdir, parses, monkeypatch):
    text, name = sample("cnn.hlo")
    cache.cached_parse(text, name)
    monkeypatch.setattr(os, "geteuid", lambda: 12345, raising=False)
    cache.cached_parse(text, name)
    assert len(parses) == 2


def test_a_directory_in_place_of_an_entry(cdir, parses):
    text, name = sample("cnn.hlo")
    path = entry_for(cdir, text, name)
    path.mkdir(parents=True)
    m = cache.cached_parse(text, name)
    assert m == parse(text, name)
    cache.cached_parse(text, name)
    assert len(parses) == 2 and path.is_dir()


# ----------------------------------------------------------------------------- unusable directory

def test_directory_that_cannot_be_created(monkeypatch, tmp_path, parses):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("HLO_CACHE_DIR", str(blocker / "cache"))
    text, name = sample("cnn.hlo")
    assert cache.cached_parse(text, name) == parse(text, name)
    assert cache.cached_parse(text, name) == parse(text, name)
    assert len(parses) == 2
    assert cache.cache_info().entries == 0
    assert cache.clear_cache() == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="permissions do not apply to root")
def test_read_only_directory(cdir, parses):
    cdir.mkdir()
    cdir.chmod(0o500)
    try:
        text, name = sample("cnn.hlo")
        assert cache.cached_parse(text, name) == parse(text, name)
        assert entries(cdir) == []
    finally:
        cdir.chmod(0o700)


def test_write_permission_denied(cdir, parses, monkeypatch):
    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(cache.tempfile, "mkstemp", denied)
    text, name = sample("cnn.hlo")
    assert cache.cached_parse(text, name) == parse(text, name)
    assert cache.cached_parse(text, name) == parse(text, name)
    assert len(parses) == 2
    assert not cdir.exists() or entries(cdir) == []


def test_failed_rename_leaves_no_temporary_file(cdir, monkeypatch):
    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cache.os, "replace", fail)
    text, name = sample("cnn.hlo")
    assert cache.cached_parse(text, name) == parse(text, name)
    assert list(cdir.iterdir()) == []


def test_hit_in_a_directory_where_mtime_cannot_be_updated(cdir, parses, monkeypatch):
    text, name = sample("cnn.hlo")
    cache.cached_parse(text, name)

    def denied(*a, **k):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(cache.os, "utime", denied)
    assert cache.cached_parse(text, name) == parse(text, name)
    assert len(parses) == 1


def test_generic_reductions_when_the_instruction_fields_change(cdir, monkeypatch):
    """If Instruction's fields no longer match the fast path, the generic reductions still give the
    same module."""
    monkeypatch.setattr(serial._Codec, "_fast_instruction_ok", staticmethod(lambda *a: False))
    monkeypatch.setattr(serial, "_the_codec", None)
    text, name = sample("rng.opt.hlo")
    expected = parse(text, name)
    key = cache._key(text, name)
    path = entry_for(cdir, text, name)
    assert cache._store(cdir, path, key, expected)
    assert_same(expected, cache._load(path, key))


def test_uncacheable_module_is_returned_but_not_stored(cdir):
    text, name = sample("cnn.hlo")
    m = parse(text, name)
    odd = dataclasses.replace(m, attrs={"x": threading.Lock()})
    key = cache._key(text, name)
    assert cache._store(cdir, entry_for(cdir, text, name), key, odd) is False
    assert not cdir.exists() or list(cdir.iterdir()) == []


# ----------------------------------------------------------------------------- concurrency

def test_concurrent_writers_and_readers_threads(cdir):
    text, name = sample("mlp_train_step.hlo")
    expected = parse(text, name)
    key = cache._key(text, name)
    path = entry_for(cdir, text, name)
    errors: list = []
    loaded = [0]
    stop = time.monotonic() + 1.5

    def writer():
        try:
            while time.monotonic() < stop:
                cache._store(cdir, path, key, expected)
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            while time.monotonic() < stop:
                m = cache._load(path, key)
                if m is not None:
                    assert_same(expected, m)
                    loaded[0] += 1
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(3)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert loaded[0] > 0
    assert entries(cdir) == [path]
    assert [p for p in cdir.iterdir() if p.name.startswith(".")] == []     # no temporary file left
    assert_same(expected, cache._load(path, key))


def _hammer(text, name, rounds, clear):
    from hlo_cli.sources import cache as c
    expected = parse(text, name)
    for r in range(rounds):
        if clear and r % 2 == 0:
            c.clear_cache()              # make the others miss, and write the same key concurrently
        m = c.cached_parse(text, name)
        assert_same(expected, m)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_concurrent_writers_and_readers_processes(cdir):
    text, name = sample("scan_loop.hlo")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(text, name, 25, k % 2 == 0)) for k in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert len(entries(cdir)) <= 1
    assert_same(parse(text, name), cache.cached_parse(text, name))


# ----------------------------------------------------------------------------- size bound

def _store_samples(names, cdir, mtime_base=None):
    paths = []
    for k, n in enumerate(names):
        text, name = sample(n)
        cache.cached_parse(text, name)
        p = entry_for(cdir, text, name)
        if mtime_base is not None and p.exists():
            t = mtime_base + k
            os.utime(p, (t, t))          # a clear order, whatever the file system's mtime resolution
        paths.append(p)
    return paths


def test_eviction_keeps_at_most_max_entries(cdir, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    paths = _store_samples(SMALL[:5], cdir, mtime_base=time.time() - 1000)
    assert entries(cdir) == sorted(paths[2:])        # the two oldest are gone


def test_eviction_is_least_recently_used(cdir, monkeypatch, parses):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    a, b, c = _store_samples(SMALL[:3], cdir, mtime_base=time.time() - 1000)
    cache.cached_parse(*sample(SMALL[0]))            # a hit makes the oldest entry the newest
    assert len(parses) == 3
    d, = _store_samples(SMALL[3:4], cdir)
    assert entries(cdir) == sorted([a, c, d])


def test_eviction_keeps_the_byte_bound(cdir, monkeypatch):
    sizes = {}
    for n in SMALL:
        text, name = sample(n)
        cache.cached_parse(text, name)
        sizes[n] = entry_for(cdir, text, name).stat().st_size
    cache.clear_cache()
    bound = sorted(sizes.values())[-1] + sorted(sizes.values())[-2]
    monkeypatch.setenv("HLO_CACHE_MAX_BYTES", str(bound))
    paths = _store_samples(SMALL, cdir, mtime_base=time.time() - 1000)
    info = cache.cache_info()
    assert info.max_bytes == bound
    assert 1 <= info.entries < len(SMALL)
    assert info.bytes <= bound
    assert paths[-1].exists()                        # the newest entry is kept


def test_entry_larger_than_the_bound_is_not_stored(cdir, monkeypatch, parses):
    monkeypatch.setattr(cache, "MAX_BYTES", 100)
    text, name = sample("cnn.hlo")
    assert cache.cached_parse(text, name) == parse(text, name)
    assert not cdir.exists() or entries(cdir) == []


def test_max_entries_from_the_environment(cdir, monkeypatch):
    monkeypatch.setenv("HLO_CACHE_MAX_ENTRIES", "2")
    _store_samples(SMALL[:4], cdir, mtime_base=time.time() - 1000)
    assert len(entries(cdir)) == 2
    assert cache.cache_info().max_entries == 2


def test_stale_temporary_files_are_removed(cdir):
    cdir.mkdir()
    stale = cdir / ".tmp-crashed.part"
    fresh = cdir / ".tmp-writing.part"
    stale.write_bytes(b"x" * 10)
    fresh.write_bytes(b"y" * 10)
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    assert cache.cache_info().entries == 0 and stale.exists()          # info only looks
    cache.cached_parse(*sample("cnn.hlo"))                              # a store cleans up
    assert not stale.exists() and fresh.exists()


# ----------------------------------------------------------------------------- info and clear

def test_cache_info_and_clear(cdir):
    assert cache.cache_info().entries == 0
    assert cache.clear_cache() == 0
    _store_samples(SMALL[:3], cdir)
    info = cache.cache_info()
    assert info.directory == cdir
    assert info.entries == 3
    assert info.bytes == sum(p.stat().st_size for p in entries(cdir))
    assert info.max_entries == cache.MAX_ENTRIES and info.max_bytes == cache.MAX_BYTES
    other = cdir / "notes.txt"
    other.write_text("not ours")
    assert cache.clear_cache() == 3
    assert entries(cdir) == [] and other.exists()
    assert cache.cache_info().entries == 0


def test_entry_file_layout(cdir):
    text, name = sample("cnn.hlo")
    cache.cached_parse(text, name)
    (path,) = entries(cdir)
    data = path.read_bytes()
    magic, version, key, length, digest = cache._HEADER.unpack_from(data)
    assert magic == cache._MAGIC and version == cache.FORMAT_VERSION
    assert key == cache._key(text, name) and path.name == key.hex() + ".hlc"
    assert length == len(data) - cache._HEADER.size
    assert digest == hashlib.sha256(data[cache._HEADER.size:]).digest()
    if sys.platform != "win32":
        assert path.stat().st_mode & 0o077 == 0              # private to the user


# ----------------------------------------------------------------------------- lazy computations (format 2)

def test_an_entry_of_the_previous_format_is_a_miss_and_is_rewritten(cdir, parses):
    text, name = sample("scan_loop.hlo")
    cache.cached_parse(text, name)
    p = entry_for(cdir, text, name)
    # an entry of an older format (the eager form of the module under its version) is not read
    write_entry(p, cache._key(text, name), serial.serialize_module(parse(text, name)),
                version=cache.FORMAT_VERSION - 1)
    m = cache.cached_parse(text, name)
    assert parses == [name, name]                          # not read: parsed again
    assert_same(parse(text, name), m)
    magic, version = cache._HEADER.unpack_from(p.read_bytes())[:2]
    assert magic == cache._MAGIC and version == cache.FORMAT_VERSION == 3
    assert_same(parse(text, name), cache.cached_parse(text, name))
    assert parses == [name, name]


def test_computations_are_decoded_on_their_first_read(cdir, parses):
    text, name = sample("mlp_train_step.hlo")
    cache.cached_parse(text, name)
    m = cache.cached_parse(text, name)
    assert parses == [name]
    comps = m.computations
    assert len(comps) > 2 and all(type(c) is LazyComputation for c in comps)
    assert not any("_instructions" in vars(c) for c in comps)
    entry = m.entry_computation                            # by name: decodes nothing
    assert not any("_instructions" in vars(c) for c in comps)
    fresh = parse(text, name)
    assert entry.instructions == fresh.entry_computation.instructions
    assert [("_instructions" in vars(c)) for c in comps] == [c is entry for c in comps]
    assert entry.instructions is entry.instructions       # decoded once
    assert m == fresh and assert_same(fresh, m) is None


def test_concurrent_first_reads_get_the_same_instructions(cdir):
    text, name = sample("attention.hlo")
    cache.cached_parse(text, name)
    comp = cache.cached_parse(text, name).entry_computation
    got, barrier = [], threading.Barrier(8)

    def read():
        barrier.wait()
        got.append(comp.instructions)
    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got)


def test_a_lazy_module_copies_and_pickles_as_plain_computations(cdir):
    import copy
    text, name = sample("cond_switch.hlo")
    cache.cached_parse(text, name)
    m = cache.cached_parse(text, name)
    fresh = parse(text, name)
    for c, f in zip(m.computations, fresh.computations):
        for other in (copy.copy(c), copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
            assert type(other) is Computation and other == f
            assert other.instructions == f.instructions
        r = dataclasses.replace(c, root=c.root)
        assert r == f and r.instructions == f.instructions
    assert_same(fresh, serial.deserialize_module(serial.serialize_module(m)))   # the eager form
    assert_same(fresh, serial.load(serial.dump(m).getvalue()))                  # lazy again


def test_a_planted_computation_part_cannot_run_code():
    import os as _os

    class Planted:
        def __reduce__(self):
            values = ("c",) + (None,) * (len(dataclasses.fields(Computation)) - 2)
            return serial._mk_lazy_computation, ([], [pickle.dumps([(_os.getcwd,)], protocol=5)], 0, *values)
    comp = serial._codec().loads(pickle.dumps(Planted(), protocol=5), 0)
    assert type(comp) is LazyComputation
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        comp.instructions


def test_planted_instruction_rows_cannot_run_code_and_malformed_rows_are_errors():
    """A chunk's rows (format 3) are read by the same unpickler: a global outside the IR is refused,
    and rows of the wrong form are an error of decoding, not a crash elsewhere."""
    import os as _os

    def planted(chunk):
        class Planted:
            def __reduce__(self):
                values = ("c",) + (None,) * (len(dataclasses.fields(Computation)) - 2)
                return serial._mk_lazy_computation, ([], [pickle.dumps(chunk, protocol=5)], 0, *values)
        return serial._codec().loads(pickle.dumps(Planted(), protocol=5), 0)
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        planted([[("a", "add", _os.getcwd, (), {}, None, None, "f", 1, 1, None)]]).instructions
    with pytest.raises(pickle.UnpicklingError, match="malformed"):
        planted([[("a", "add")]]).instructions
    with pytest.raises(pickle.UnpicklingError, match="malformed"):
        serial._codec().loads(pickle.dumps(_EagerPlanted(), protocol=5), 0)
    with pytest.raises(pickle.UnpicklingError, match="are a NoneType"):
        planted([]).instructions                                  # no computation at that place
    with pytest.raises(pickle.UnpicklingError, match="chunk of instructions is a tuple"):
        planted(()).instructions


class _EagerPlanted:
    def __reduce__(self):
        return serial._mk_computation, ("not rows", "c")


def test_the_stored_rows_share_the_strings_the_parser_shares(cdir):
    """An operand is the very string of its definition's name and an opcode the table's string, so
    the entry stores each once; the module read back is the parsed one."""
    text, name = sample("mlp_train_step.hlo")
    m = parse(text, name)
    for c in m.computations:
        by_name = {i.name: i for i in c.instructions}
        for i in c.instructions:
            assert all(o is by_name[o].name for o in i.operands if o in by_name), i.name
    assert_same(m, serial.load(serial.dump(m).getvalue()))
    assert_same(m, serial.deserialize_module(serial.serialize_module(m)))


def test_computations_of_one_chunk_are_decoded_together_and_read_alone(cdir, monkeypatch):
    """Small computations share a chunk (one pickle): the first read of any of them decodes the
    chunk once, and each computation takes its own instructions, the parsed ones."""
    monkeypatch.setattr(serial, "CHUNK_INSTRUCTIONS", 10 ** 9)        # one chunk for the whole module
    text, name = sample("mlp_train_step.hlo")
    fresh = parse(text, name)
    m = serial.load(serial.dump(fresh).getvalue())
    comps = m.computations
    assert len({id(vars(c)["_chunk"]) for c in comps}) == 1
    assert comps[-1].instructions == fresh.computations[-1].instructions
    assert [("_instructions" in vars(c)) for c in comps] == [c is comps[-1] for c in comps]
    assert all(c.instructions == f.instructions for c, f in zip(comps, fresh.computations))
    monkeypatch.setattr(serial, "CHUNK_INSTRUCTIONS", 1)              # a chunk per computation
    m = serial.load(serial.dump(fresh).getvalue())
    assert len({id(vars(c)["_chunk"]) for c in m.computations}) == len(m.computations)
    assert_same(fresh, m)
