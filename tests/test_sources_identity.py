"""The derived-results cache's fingerprint of the package's sources (sources/cache.py
`sources_identity`): read from the files' os.stat, it changes with any edit, new file, removed
file, rename or replacement, and not with bytecode under __pycache__."""
from __future__ import annotations

import os

from hlo_cli.sources import cache


def _tree(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not a source\n")
    return tmp_path / "pkg"


def test_every_kind_of_change_to_a_source_changes_it(tmp_path):
    pkg = _tree(tmp_path)
    seen = {cache.sources_identity(pkg)}
    assert cache.sources_identity(pkg) in seen                       # (stable)
    b = pkg / "sub" / "b.py"
    st = b.stat()
    b.write_text("y = 3\n")                                          # same size, new contents
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    changes = [lambda: (pkg / "a.py").write_text("x = 10\n"),       # longer
               lambda: (pkg / "sub" / "c.py").write_text(""),       # a new file
               lambda: (pkg / "sub" / "c.py").rename(pkg / "c.py"),  # moved
               lambda: (pkg / "sub" / "b.py").unlink()]              # removed
    seen_after = [cache.sources_identity(pkg)]
    for change in changes:
        change()
        seen_after.append(cache.sources_identity(pkg))
    assert len(set(seen_after)) == len(seen_after) and not seen & set(seen_after)


def test_a_file_replaced_with_the_same_stamp_changes_it(tmp_path):
    pkg = _tree(tmp_path)
    a = pkg / "a.py"
    before = cache.sources_identity(pkg)
    st = a.stat()
    tmp = pkg / "a.py.new"
    tmp.write_text("x = 2\n")                                       # same size and time, new inode
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    keep = pkg / "keep.txt"                                          # (holds the old inode)
    os.link(a, keep)
    os.replace(tmp, a)
    assert cache.sources_identity(pkg) != before


def test_bytecode_and_other_files_do_not_count(tmp_path):
    pkg = _tree(tmp_path)
    before = cache.sources_identity(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0" * 16)
    (pkg / "__pycache__" / "stray.py").write_text("")
    (pkg / "data.json").write_text("{}")
    assert cache.sources_identity(pkg) == before


def test_the_package_fingerprint_covers_its_own_sources():
    pkg = os.path.dirname(os.path.dirname(cache.__file__))
    assert cache._all_sources_fingerprint() != cache._code_fingerprint()
    assert len(cache._source_stats(os.path.join(os.fsencode(pkg), b""), b"")) > 100
