"""`hlo run` (and `hlo check`) against hostile input and hostile file systems: what is not a regular
file, byte-order marks alone, archives that inflate to gigabytes, files a dump must not delete or
replace, links it must not write through, read-only and full disks, inputs too big to allocate, and
what the JSON and the manifest say about a run (tool version, module hash, seed, inputs, timings).

Every case asserts the exit code, a fragment of the message, that no traceback appears, and that
the user's files are untouched (byte for byte, links still pointing where they pointed).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import hlo_cli
from hlo_cli.cli import main
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "run"
RESULTS = DATA / "results.hlo"          # (x + y, (x > y, 7), token) of x, y: f32[2,3]
LOOP = DATA / "while_loop.hlo"          # v: f32[3] doubled 5 times in a while loop

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 2.5, np.float32)
V = np.array([1, 2, 3], np.float32)


def _subprocess(*args, stdin=None, timeout=120):
    """`hlo ARGS` in a child process (for what would hang or read forever if it regressed)."""
    code = "import sys; from hlo_cli.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], stdin=stdin, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, HLO_CACHE_DIR="off"))


def _snapshot(d: Path) -> dict:
    """Every entry of D: bytes of files, targets of links."""
    out = {}
    for p in sorted(d.iterdir()):
        out[p.name] = ("link", os.readlink(p)) if p.is_symlink() else ("file", p.read_bytes()) if p.is_file() \
            else ("other", None)
    return out


# ============================================================================ what is not a regular file

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("command", ["check", "run"])
def test_a_fifo_module_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "m.hlo"
    os.mkfifo(fifo)                             # nobody writes: opening it to read would block
    r = _subprocess(command, fifo)
    assert r.returncode == 2, r.stderr
    assert "named pipe (FIFO), not a regular file" in r.stderr and "m.hlo" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_refused_as_a_file_and_as_stdin():
    r = _subprocess("check", "/dev/zero")
    assert r.returncode == 2 and "/dev/zero" in r.stderr and "character device" in r.stderr
    with open("/dev/zero", "rb") as zero:
        r = _subprocess("run", "-", "--random-inputs", stdin=zero)
    assert r.returncode == 2 and "standard input is a character device" in r.stderr
    with open(os.devnull, "rb") as null:        # /dev/null reads as empty: that is what it says
        r = _subprocess("check", "-", stdin=null)
    assert r.returncode == 2 and "standard input is empty" in r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_input_is_refused(hlo, tmp_path):
    os.mkfifo(tmp_path / "x.npy")
    r = hlo("run", LOOP, "-i", "x.npy")
    assert r.exit_code == 2 and "--input x.npy: x.npy is a named pipe (FIFO), not a regular file" in r.stderr
    r = hlo("run", LOOP, "--inputs", "x.npy")
    assert r.exit_code == 2 and "FIFO" in r.stderr
    np.save("v.npy", V)
    r = hlo("run", LOOP, "-i", "v.npy", "--expect", "x.npy")
    assert r.exit_code == 2 and "--expect x.npy" in r.stderr and "FIFO" in r.stderr


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf", b"\xef\xbb\xbf \n\t\r\n", b"", b" \n \n"],
                         ids=["bom", "bom-and-whitespace", "nothing", "whitespace"])
def test_a_bom_alone_is_an_empty_module(hlo, tmp_path, data):
    r = hlo("check", "-", input=data)
    assert r.exit_code == 2 and "standard input is empty" in r.stderr
    (tmp_path / "m.hlo").write_bytes(data)
    for command in ("check", "run"):
        r = hlo(command, "m.hlo")
        assert r.exit_code == 2 and "m.hlo" in r.stderr and "empty" in r.stderr


def test_a_bom_before_a_module_is_still_read(hlo, tmp_path):
    (tmp_path / "m.hlo").write_bytes(b"\xef\xbb\xbf" + LOOP.read_bytes())
    np.save("v.npy", V)
    r = hlo("run", "m.hlo", "-i", "v.npy", "-o", "out.npy")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(np.load("out.npy"), V * 32)


# ============================================================================ archives read header first

def _npy_with_header_only(f, shape, descr="<f4", tail=b"\0" * 64):
    """An .npy stream whose header promises SHAPE but whose data stops after a few bytes: reading
    the data would fail with an EOF, so a 'shape' error proves the data was never read."""
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    f.write(tail)


def test_an_archive_member_of_the_wrong_shape_is_never_inflated(hlo, tmp_path):
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            _npy_with_header_only(f, (50000, 100000))      # 20 GB promised
        with z.open("y.npy", "w") as f:
            np.save(f, Y)
    r = hlo("run", RESULTS, "--inputs", "bomb.npz")
    assert r.exit_code == 2
    assert "parameter 0 'x' (from bomb.npz[x]): expected shape f32[2,3], got an array of float32[50000, 100000]" \
        in r.stderr


def test_a_real_deflate_bomb_is_refused_without_inflating(hlo, tmp_path):
    """200 MB of zeros deflate to 200 KB; its header is read, its data never."""
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (50_000_000,)})
            chunk = bytes(1 << 20)
            for _ in range(200):
                f.write(chunk)
        with z.open("y.npy", "w") as f:
            np.save(f, Y)
    assert (tmp_path / "bomb.npz").stat().st_size < 1 << 20
    calls = []
    real = np.lib.format.read_array
    np.lib.format.read_array = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        r = hlo("run", RESULTS, "--inputs", "bomb.npz")
    finally:
        np.lib.format.read_array = real
    assert r.exit_code == 2 and "expected shape f32[2,3]" in r.stderr and "float32[50000000]" in r.stderr
    assert calls == []


def test_an_npy_of_the_wrong_shape_or_type_is_refused_from_its_header(hlo, tmp_path):
    with open(tmp_path / "big.npy", "wb") as f:
        _npy_with_header_only(f, (100000, 100000))
    with open(tmp_path / "text.npy", "wb") as f:
        _npy_with_header_only(f, (2, 3), descr="<U100000")
    np.save("y.npy", Y)
    r = hlo("run", RESULTS, "-i", "big.npy", "-i", "y.npy")
    assert r.exit_code == 2 and "expected shape f32[2,3], got an array of float32[100000, 100000]" in r.stderr
    r = hlo("run", RESULTS, "-i", "text.npy", "-i", "y.npy")
    assert r.exit_code == 2 and "expected f32[2,3] (float32), got an array of <U100000[2, 3]" in r.stderr


def test_unknown_archive_members_are_refused_before_reading(hlo, tmp_path):
    with zipfile.ZipFile(tmp_path / "a.npz", "w") as z:
        for name, shape in (("x", (2, 3)), ("y", (2, 3)), ("junk", (10**9,))):
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                _npy_with_header_only(f, shape)
    r = hlo("run", RESULTS, "--inputs", "a.npz")
    assert r.exit_code == 2 and "input 'junk' names no parameter" in r.stderr


def test_a_truncated_array_is_an_input_error(hlo, tmp_path):
    with open(tmp_path / "x.npy", "wb") as f:
        _npy_with_header_only(f, (2, 3), tail=b"\0" * 5)
    np.save("y.npy", Y)
    r = hlo("run", RESULTS, "-i", "x.npy", "-i", "y.npy")
    assert r.exit_code == 2 and "x.npy" in r.stderr and "cannot read the array's data" in r.stderr


def test_a_reference_of_the_wrong_shape_is_never_read(hlo, tmp_path):
    with zipfile.ZipFile(tmp_path / "ref.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("out0.npy", "w", force_zip64=True) as f:
            _npy_with_header_only(f, (100000, 100000))
        with z.open("out9.npy", "w", force_zip64=True) as f:
            _npy_with_header_only(f, (100000, 100000))
    np.save("v.npy", V)
    r = hlo("run", LOOP, "-i", "v.npy", "--expect", "ref.npz", "--format", "json")
    assert r.exit_code == 1, r.stderr
    rows = {row["key"]: row["status"] for row in json.loads(r.stdout)["expect"]["rows"]}
    assert rows == {"out0": "shape [3] vs the reference's [100000, 100000]", "out9": "not among the results"}


# ============================================================================ conversions say so

def test_float64_input_for_f32_is_rounded_with_a_note(hlo, tmp_path):
    x64 = X.astype(np.float64) / 3                  # all but 0 and 1 are not float32 numbers
    np.save("x.npy", x64)
    np.save("y.npy", Y)
    r = hlo("run", RESULTS, "-i", "x.npy", "-i", "y.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    assert ("note: parameter 0 'x' (from x.npy): float64 values rounded to float32 for f32[2,3] "
            "(4 of 6 values rounded)") in r.stderr
    with np.load("out.npz") as z:
        np.testing.assert_array_equal(z["out0"], x64.astype(np.float32) + Y)


def test_float64_beyond_f32_range_says_so(hlo, tmp_path):
    np.save("v.npy", np.array([1e300, 1, 2], np.float64))
    r = hlo("run", LOOP, "-i", "v.npy", "-o", "out.npy")
    assert r.exit_code == 0, r.stderr
    assert "1 of 3 values rounded, 1 of them beyond f32's range (now infinite)" in r.stderr
    assert np.isinf(np.load("out.npy")[0])


def test_lossless_conversions_say_so(hlo, tmp_path):
    np.save("v.npy", np.array([1, 2, 3], np.int64))
    r = hlo("run", LOOP, "-i", "v.npy")
    assert r.exit_code == 0, r.stderr
    assert "note: parameter 0 'x' (from v.npy): int64 values converted to float32 for f32[3] (no value changed)" \
        in r.stderr
    np.save("v.npy", V)
    r = hlo("run", LOOP, "-i", "v.npy")
    assert r.exit_code == 0 and "note:" not in r.stderr


def test_the_python_api_keeps_refusing_lossy_float64():
    with pytest.raises(hlo_cli.HloInputError, match="expected f32\\[3\\]"):
        hlo_cli.run(LOOP.read_text(), V.astype(np.float64) / 3)


# ============================================================================ seeds and sizes

def test_negative_seed_is_a_usage_error(hlo):
    r = hlo("run", LOOP, "--random-inputs", "--seed", "-1")
    assert r.exit_code == 2 and "--seed" in r.stderr and "negative" in r.stderr
    r = hlo("run", LOOP, "--random-inputs", "--seed", "-1", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 2 and doc["exit_code"] == 2 and doc["status"] == "error" and "--seed" in doc["message"]


@pytest.mark.parametrize("dims", ["100000,100000,1000", "9223372036854775807,4"])
def test_random_inputs_too_big_are_out_of_memory(hlo, tmp_path, dims):
    (tmp_path / "big.hlo").write_text(f"HloModule big\nENTRY main {{\n  x = f32[{dims}] parameter(0)\n"
                                      f"  ROOT n = f32[{dims}] negate(x)\n}}\n")
    need = 4 * np.prod([int(d) for d in dims.split(",")], dtype=object)
    r = hlo("run", "big.hlo", "--random-inputs")
    assert r.exit_code == 4, r.stderr
    assert f"--random-inputs: parameter 0 'x' (f32[{dims}]) needs {need:,} bytes" in r.stderr
    r = hlo("run", "big.hlo", "--random-inputs", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and doc["exit_code"] == 4 and f"{need:,} bytes" in doc["message"]
    assert doc["memory"] == {"requested_bytes": need}


def test_random_inputs_that_fail_to_allocate_are_out_of_memory(hlo, monkeypatch):
    import hlo_cli.interpreter.inputs as inputs
    monkeypatch.setattr("hlo_cli.interpreter.memory.memory_limit", lambda: None)

    def refuse(shape, rng):
        raise MemoryError("Unable to allocate")
    monkeypatch.setattr(inputs, "random_value", refuse)
    r = hlo("run", LOOP, "--random-inputs")
    assert r.exit_code == 4 and "parameter 0 'x' (f32[3]) needs 12 bytes," in r.stderr
    assert "more than can be allocated" in r.stderr


# ============================================================================ dumps never lose data

def _manifest(d) -> dict:
    return json.loads((Path(d) / "manifest.json").read_text())


def test_dump_force_leaves_a_users_manifest_tmp_alone(hlo, tmp_path):
    np.save("v.npy", V)
    d = tmp_path / "d"
    d.mkdir()
    (d / "manifest.json.tmp").write_bytes(b"my notes, not yours")
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d", "--dump-force")
    assert r.exit_code == 0, r.stderr
    assert (d / "manifest.json.tmp").read_bytes() == b"my notes, not yours"
    assert _manifest(d)["status"] == "ok"
    # and again, now that the directory has a manifest of ours but not our marker: refused, untouched
    before = _snapshot(d)
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d", "--dump-force")
    assert r.exit_code == 2 and _snapshot(d) == before


def test_a_new_dump_removes_only_our_listed_dump_files(hlo, tmp_path):
    """In a directory carrying our marker, a name is removed only if it follows our dump naming AND
    the previous manifest lists it AND it is a plain file."""
    np.save("v.npy", V)
    d = tmp_path / "d"
    assert hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d", "--dump-filter", "^r$").exit_code == 0
    ours = _manifest(d)["instructions"][0]["files"]
    outside = tmp_path / "precious.npy"
    np.save(outside, V)
    (d / "notes.txt").write_text("keep")                       # listed, but not a dump name
    np.save(d / "000099_main.mine.npy", V)                     # a dump name, but not listed
    (d / "000098_main.link.npy").symlink_to(outside)           # listed dump name, but a link
    m = _manifest(d)
    m["instructions"].append({"files": ["notes.txt", "000098_main.link.npy", "../precious.npy"]})
    (d / "manifest.json").write_text(json.dumps(m))
    kept = {n: v for n, v in _snapshot(d).items() if n not in ours and n != "manifest.json"}
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d", "--dump-filter", "^x$")
    assert r.exit_code == 0, r.stderr
    now = _snapshot(d)
    assert {n: now[n] for n in kept} == kept                   # every file not ours: untouched
    assert not any(n in now for n in ours)                     # the previous dump's file: gone
    assert outside.exists() and np.array_equal(np.load(outside), V)
    assert _manifest(d)["instructions"][0]["instruction"] == "x"


def test_a_dump_never_writes_through_a_link(hlo, tmp_path):
    np.save("v.npy", V)
    d = tmp_path / "d"
    d.mkdir()
    (d / ".hlo-dump").write_text("ours")
    target = tmp_path / "target.npy"
    (d / "000001_main.x.npy").symlink_to(target)               # dangling: would be created through
    (d / "manifest.json").symlink_to(tmp_path / "elsewhere.json")
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d")
    assert r.exit_code == 0, r.stderr
    assert not target.exists() and not (tmp_path / "elsewhere.json").exists()
    assert os.readlink(d / "000001_main.x.npy") == str(target)
    m = _manifest(d)                                            # the link was replaced, not followed
    assert not (d / "manifest.json").is_symlink()
    first = m["instructions"][0]
    assert first["instruction"] == "x" and first["files"] == ["000001_main.x~1.npy"]
    np.testing.assert_array_equal(np.load(d / "000001_main.x~1.npy"), V)
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d", "--dump-filter", "^r$")    # replaces its own dump
    assert r.exit_code == 0, r.stderr
    assert not (d / "000001_main.x~1.npy").exists() and os.readlink(d / "000001_main.x.npy") == str(target)


def test_output_never_writes_through_a_link(hlo, tmp_path):
    np.save("v.npy", V)
    target = tmp_path / "target.npy"
    os.symlink(target, "out.npy.tmp")                           # a dangling link where a fixed temp name was
    r = hlo("run", LOOP, "-i", "v.npy", "-o", "out.npy")
    assert r.exit_code == 0, r.stderr
    assert not target.exists() and os.readlink("out.npy.tmp") == str(target)
    np.testing.assert_array_equal(np.load("out.npy"), V * 32)
    os.symlink(target, "link.npy")                              # OUT itself a dangling link
    r = hlo("run", LOOP, "-i", "v.npy", "-o", "link.npy")
    assert r.exit_code == 2 and "is a symbolic link" in r.stderr and "--force" in r.stderr
    r = hlo("run", LOOP, "-i", "v.npy", "-o", "link.npy", "--force")
    assert r.exit_code == 0, r.stderr
    assert not target.exists() and not os.path.islink("link.npy")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()] == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_output_never_replaces_what_is_not_a_file(hlo, tmp_path):
    np.save("v.npy", V)
    os.mkfifo("fifo.npy")
    Path("dir.npy").mkdir()
    for name, kind in (("fifo.npy", "a named pipe (FIFO)"), ("dir.npy", "a directory")):
        r = hlo("run", LOOP, "-i", "v.npy", "-o", name, "--force")
        assert r.exit_code == 2 and f"--output {name} is {kind}; refusing to replace it" in r.stderr
    assert Path("fifo.npy").is_fifo() and Path("dir.npy").is_dir()


def test_a_read_only_dump_dir_is_exit_2(hlo, tmp_path, monkeypatch):
    import hlo_cli.pipeline.io as io

    def read_only(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    monkeypatch.setattr(io, "_create_excl", read_only)
    np.save("v.npy", V)
    (tmp_path / "d").mkdir()
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d")
    assert r.exit_code == 2 and "--dump-dir d: cannot write d/.hlo-dump" in r.stderr
    assert "Read-only file system" in r.stderr
    r = hlo("run", LOOP, "-i", "v.npy", "-o", "out.npy")
    assert r.exit_code == 2 and "--output out.npy: cannot write out.npy" in r.stderr
    assert not Path("out.npy").exists()


def test_a_full_disk_while_dumping_is_exit_2(hlo, tmp_path, monkeypatch):
    import hlo_cli.pipeline.dumps as dumps
    writes = []

    def fill_up(f, a):
        writes.append(1)
        if len(writes) == 3:
            f.write(b"\x93NUMPY partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        np.save(f, a)
    monkeypatch.setattr(dumps, "save_npy", fill_up)
    np.save("v.npy", V)
    r = hlo("run", LOOP, "-i", "v.npy", "--dump-dir", "d", "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and "--dump-dir: cannot write d/000003_main.init.leaf0.npy" in doc["message"]
    assert "No space left on device" in doc["message"]
    m = _manifest("d")
    assert m["status"] == "error" and [e["instruction"] for e in m["instructions"]] == ["x", "z"]
    assert not Path("d/000003_main.init.leaf0.npy").exists()          # no half-written file is left


def _mount_tiny_tmpfs(where: Path) -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)], capture_output=True)
    return r.returncode == 0


def test_a_really_full_disk(hlo, tmp_path):
    """On a 16 KB tmpfs (when this runs as root and may mount one): numpy's short write is reported
    as a full disk, with the path, exit 2; and a read-only remount refuses the next dump."""
    tiny = tmp_path / "tiny"
    if not _mount_tiny_tmpfs(tiny):
        pytest.skip("cannot mount a tmpfs here")
    try:
        (tmp_path / "big.hlo").write_text("HloModule big\nENTRY main {\n  x = f32[3000] parameter(0)\n"
                                          "  a = f32[3000] negate(x)\n  ROOT b = f32[3000] negate(a)\n}\n")
        r = hlo("run", "big.hlo", "--random-inputs", "--dump-dir", tiny / "d")
        assert r.exit_code == 2 and "cannot write" in r.stderr and str(tiny / "d") in r.stderr
        assert "disk is full" in r.stderr or "No space left" in r.stderr
        subprocess.run(["mount", "-o", "remount,ro", str(tiny)], check=True)
        r = hlo("run", "big.hlo", "--random-inputs", "--dump-dir", tiny / "e")
        assert r.exit_code == 2 and "Read-only file system" in r.stderr
    finally:
        subprocess.run(["umount", str(tiny)], capture_output=True)


# ============================================================================ what the run reports

def test_json_says_what_ran_on_what(hlo, tmp_path):
    np.save("x.npy", X)
    np.savez("more.npz", y=Y)
    r = hlo("run", RESULTS, "-i", "x.npy", "--inputs", "more.npz", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tool"] == {"name": "hlo", "version": hlo_cli.__version__}
    assert doc["module_file"] == str(RESULTS)
    assert doc["module_sha256"] == hashlib.sha256(RESULTS.read_bytes()).hexdigest()
    assert doc["inputs"] == [{"parameter": "x", "number": 0, "file": "x.npy"},
                             {"parameter": "y", "number": 1, "file": "more.npz[y]"}]
    assert "seed" not in doc
    t = doc["timings"]
    assert {"parse_s", "check_s", "inputs_s", "execute_s", "write_s"} <= set(t)
    assert all(isinstance(v, float) and v >= 0 for v in t.values())


def test_json_and_manifest_of_a_random_run(hlo):
    r = hlo("run", LOOP, "--random-inputs", "--seed", "7", "--format", "json", "--dump-dir", "d")
    assert r.exit_code == 0, r.stderr
    doc, m = json.loads(r.stdout), _manifest("d")
    for d in (doc, m):
        assert d["inputs"] == [{"parameter": "x", "number": 0, "random": True}] and d["seed"] == 7
        assert d["tool"]["version"] == hlo_cli.__version__
        assert d["module_sha256"] == hashlib.sha256(LOOP.read_bytes()).hexdigest()
        assert {"parse_s", "check_s", "execute_s"} <= set(d["timings"])


def test_json_for_errors_of_every_kind(hlo, tmp_path, monkeypatch):
    np.save("v.npy", V)
    r = hlo("run", LOOP, "-i", "v.npy", "--rtol", "-1", "--format", "json")    # a usage error in the body
    assert r.exit_code == 2 and json.loads(r.stdout)["exit_code"] == 2
    import hlo_cli.interpreter as interp

    def boom(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(interp, "run_module", boom)
    result = CliRunner().invoke(main, ["run", str(LOOP), "-i", "v.npy", "--format", "json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 3 and doc["exit_code"] == 3 and doc["status"] == "error"
    assert doc["message"] == "internal error: RuntimeError: a bug" and "timings" in doc

    def oom(*a, **k):
        raise MemoryError()
    monkeypatch.setattr(interp, "run_module", oom)
    result = CliRunner().invoke(main, ["run", str(LOOP), "-i", "v.npy", "--format", "json"])
    assert result.exit_code == 4 and json.loads(result.stdout)["exit_code"] == 4


def test_json_for_the_interpreters_out_of_memory(hlo, tmp_path):
    """A result no run could hold is the evaluator's HloResourceError: the JSON names it too."""
    (tmp_path / "huge.hlo").write_text("HloModule huge\nENTRY main {\n  x = f32[] parameter(0)\n"
                                       "  ROOT b = f32[100000,100000,1000] broadcast(x), dimensions={}\n}\n")
    np.save("x.npy", np.float32(1))
    r = hlo("run", "huge.hlo", "-i", "x.npy", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and doc["exit_code"] == 4 and doc["status"] == "error"
    assert doc["memory"]["instruction"] == "b" and doc["memory"]["result_bytes"] == 4 * 10**13
    assert doc["diagnostics"][0]["line"] == 4 and doc["inputs"] == [{"parameter": "x", "number": 0,
                                                                     "file": "x.npy"}]
