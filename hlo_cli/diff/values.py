"""Keeping A's values until B's run has compared them, and comparing two values.

The store keeps a value only while a comparison still needs it: each (node, execution) is kept for
as many of B's instructions as are matched to the node, and dropped after the last one took it.
Values stay in memory up to `keep_bytes`; beyond that their bytes are appended to segment files
(256 MB each) in a temporary directory and read back when B's run needs them; a segment is removed
once every value in it was taken, the directory at the end.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from ..pipeline.compare import differences
from ..pipeline.io import leaves_with_shapes, scalar_str

DEFAULT_KEEP_BYTES = 1 << 30
SEGMENT_BYTES = 256 << 20


def copy_leaves(value, shape) -> list:
    """The array leaves of VALUE, copied (an evaluation rule may later reuse a dead operand's buffer)."""
    return [np.array(v, copy=True) for v, _ in leaves_with_shapes(value, shape)]


class ValueStore:
    """A's values by (node, execution count), each kept for `uses` takes."""

    def __init__(self, keep_bytes: int | None = None):
        self.keep_bytes = DEFAULT_KEEP_BYTES if keep_bytes is None else keep_bytes
        self.mem: dict = {}           # key -> [leaves, uses left]
        self.disk: dict = {}          # key -> [[(segment, offset, dtype, shape)...], uses left]
        self.bytes = 0
        self.peak_bytes = 0
        self.spilled_bytes = 0
        self._dir = None
        self._segments: dict = {}     # number -> [path, values not yet taken]
        self._readers: dict = {}      # number -> a file descriptor open for reading
        self._current = None          # (number, open file, bytes written)

    def put(self, key, leaves: list, uses: int):
        """Keep LEAVES for USES takes."""
        n = sum(a.nbytes for a in leaves)
        if not leaves or self.bytes + n <= self.keep_bytes:
            self.mem[key] = [leaves, uses]
            self.bytes += n
            self.peak_bytes = max(self.peak_bytes, self.bytes)
            return
        seg, f, _ = self._segment()
        where = []
        for a in leaves:
            off = f.tell()
            f.write(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data if a.size else b"")
            where.append((seg, off, a.dtype, a.shape))
        self._current = (seg, f, f.tell())
        self._segments[seg][1] += 1
        self.spilled_bytes += n
        self.disk[key] = [where, uses]

    def _segment(self):
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="hlo-diff-")
        cur = self._current
        if cur is None or cur[2] >= SEGMENT_BYTES:
            if cur is not None:
                cur[1].close()
                self._drop_if_done(cur[0])
            seg = len(self._segments)
            path = os.path.join(self._dir, f"segment{seg}.bin")
            self._current = cur = (seg, open(path, "w+b"), 0)
            self._segments[seg] = [path, 0]
        return cur

    def _drop_if_done(self, seg):
        entry = self._segments.get(seg)
        if entry is not None and entry[1] <= 0 and (self._current is None or self._current[0] != seg):
            fd = self._readers.pop(seg, None)
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(entry[0])
            except OSError:
                pass
            del self._segments[seg]

    def peek(self, key):
        """The leaves of KEY without taking them (None when not kept in memory)."""
        e = self.mem.get(key)
        return None if e is None else e[0]

    def take(self, key):
        """The leaves of KEY (None when A never produced it); the last use frees them."""
        e = self.mem.get(key)
        if e is not None:
            e[1] -= 1
            if e[1] <= 0:
                del self.mem[key]
                self.bytes -= sum(a.nbytes for a in e[0])
            return e[0]
        e = self.disk.get(key)
        if e is None:
            return None
        leaves = []
        for seg, off, dtype, shape in e[0]:
            cur = self._current
            if cur is not None and cur[0] == seg:
                cur[1].flush()
            count = int(np.prod(shape, dtype=np.int64))
            fd = self._readers.get(seg)
            if fd is None:
                fd = self._readers[seg] = os.open(self._segments[seg][0], os.O_RDONLY)
            raw = os.pread(fd, count * dtype.itemsize, off)
            leaves.append(np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape))
        e[1] -= 1
        if e[1] <= 0:
            del self.disk[key]
            seg = e[0][0][0] if e[0] else None
            if seg is not None:
                self._segments[seg][1] -= 1
                self._drop_if_done(seg)
        return leaves

    def close(self):
        self.mem.clear()
        self.disk.clear()
        if self._current is not None:
            self._current[1].close()
            self._current = None
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def compare_leaves(a_leaves: list, b_leaves: list, rtol: float, atol: float) -> dict:
    """Compare B's leaves with A's (A is the reference): |b - a| <= atol + rtol * |a| elementwise,
    NaN equal to NaN, infinities equal to themselves.  Leaves of other shapes but the same element
    count are compared after reshaping B's to A's shape (row-major).  Returns a dict with status
    (agree, differ, skipped), max_abs_diff, max_rel_diff, where (the index in A's leaf of the
    largest difference among the mismatched elements), leaf, mismatched, size, a_value, b_value,
    and note."""
    if len(a_leaves) != len(b_leaves):
        return {"status": "skipped", "note": f"{len(a_leaves)} arrays vs {len(b_leaves)}"}
    out = {"status": "agree", "max_abs_diff": 0.0, "max_rel_diff": 0.0, "where": None, "mismatched": 0,
           "size": 0}
    notes = []
    for k, (a, b) in enumerate(zip(a_leaves, b_leaves)):
        r = _compare_one(np.asarray(a), np.asarray(b), rtol, atol)
        if r.get("note"):
            notes.append(r["note"])
        if r["status"] == "skipped":
            return {"status": "skipped", "note": r["note"]}
        out["size"] += r["size"]
        out["mismatched"] += r["mismatched"]
        out["max_abs_diff"] = max(out["max_abs_diff"], r["max_abs_diff"])
        out["max_rel_diff"] = max(out["max_rel_diff"], r["max_rel_diff"])
        if r["status"] == "differ" and out["status"] == "agree":
            out.update(status="differ", where=r["where"], a_value=r["a_value"], b_value=r["b_value"])
            if len(a_leaves) > 1:
                out["leaf"] = k
    if notes:
        out["note"] = "; ".join(dict.fromkeys(notes))
    return out


def _compare_one(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> dict:
    if a.dtype == b.dtype and a.shape == b.shape and a.dtype.kind != "O" and \
            np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)):
        return {"status": "agree", "max_abs_diff": 0.0, "max_rel_diff": 0.0, "where": None, "mismatched": 0,
                "size": int(a.size), "note": None}        # the same bits (the common case, and fast)
    note = None
    if a.shape != b.shape:
        if a.size != b.size:
            return {"status": "skipped", "note": f"shape {list(a.shape)} vs {list(b.shape)}"}
        b = b.reshape(a.shape)
        note = "compared after a reshape"
    if a.dtype != b.dtype:
        note = (note + "; " if note else "") + f"{a.dtype} vs {b.dtype}"
    try:
        cplx = a.dtype.kind == "c" or b.dtype.kind == "c"
        wide = np.complex128 if cplx else np.float64
        fa, fb = a.astype(wide), b.astype(wide)
    except (TypeError, ValueError):
        if a.dtype == b.dtype and a.tobytes() == b.tobytes():
            return {"status": "agree", "max_abs_diff": 0.0, "max_rel_diff": 0.0, "where": None, "mismatched": 0,
                    "size": int(a.size), "note": note}
        return {"status": "skipped", "note": f"cannot compare {a.dtype} with {b.dtype}"}
    close, diff, finite, max_abs, max_rel = differences(fb, fa, rtol, atol)     # A is the reference
    bad = ~close
    nbad = int(bad.sum())
    r = {"status": "differ" if nbad else "agree", "mismatched": nbad, "size": int(a.size),
         "max_abs_diff": max_abs, "max_rel_diff": max_rel, "where": None, "note": note}
    if nbad:
        score = np.where(bad, np.where(np.isnan(diff), np.inf, diff), -1.0)
        flat = int(np.argmax(score)) if score.size else 0
        idx = tuple(int(i) for i in np.unravel_index(flat, a.shape)) if a.ndim else ()
        r["where"] = list(idx)
        r["a_value"] = scalar_str(a[idx], a)
        r["b_value"] = scalar_str(b[idx], b)
        if not finite[idx]:               # the place shown is not where the max |diff| is
            r["note"] = ((r["note"] + "; ") if r["note"] else "") + (
                f"a NaN or Inf in one of the two at {list(idx)}; max |diff| is over the finite differences")
    return r
