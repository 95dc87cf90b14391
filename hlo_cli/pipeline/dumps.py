"""`hlo run --dump-dir`: every executed instruction's value as .npy files, and a manifest.

A dump directory is ours when it carries the marker file `.hlo-dump`.  A new dump into one of
ours removes the files of the previous dump, and only those: names that follow our naming
(`NNNNNN_computation.instruction[.count][.devD][.leafK][~N].npy`; `.devD` in a multi-device run, for
a value that differs between devices: device D's) AND are listed in the previous manifest,
and that are plain files (a link is left alone).  Nothing else is ever removed or replaced:
every file is created exclusively (an existing name gets `~1`, `~2`...), and the manifest is
written under a fresh temporary name and renamed into place.  A failed write (a read-only
directory, a full disk) is an HloInputError naming the path.
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from ..errors import HloInputError
from .io import leaves_with_shapes, replace_file, save_npy, stats, write_new

OUR_DUMP_FILE = re.compile(r"^\d{6,}_[\w.\-]*(~\d+)?\.npy$")
MARKER = ".hlo-dump"
MANIFEST = "manifest.json"
_MARKER_TEXT = "This directory holds a dump written by `hlo run --dump-dir`.\n"


class DumpFailed(BaseException):
    """Raised by the dumper when a file cannot be written, to stop the run (a BaseException, so
    that no evaluation rule's error handling takes it for the instruction's failure).  `error` is
    the HloInputError to report."""

    def __init__(self, error: HloInputError):
        super().__init__(str(error))
        self.error = error


def source_of(module, inst) -> dict:
    """op_name, and the source file:line of the instruction (through the StackFrames section when
    the metadata has a stack_frame_id, else its source_file/source_line)."""
    md = inst.attrs.get("metadata")
    out = {}
    if md is None:
        return out
    if md.op_name:
        out["op_name"] = md.op_name
    fid = md.stack_frame_id
    if fid and module.stack_frames:
        stack = module.stack_frames.resolve(fid)
        if stack:
            f, _fn, line, _col = stack[0]
            out["source"] = f"{f}:{line}"
            out["stack"] = [f"{f}:{ln} ({fnn})" for f, fnn, ln, _ in stack]
    if "source" not in out and md.source_file:
        out["source"] = f"{md.source_file}:{md.source_line or 0}"
    return out


class Dumper:
    """A run hook writing every executed instruction's value (one .npy per tuple leaf) into DIRECTORY,
    and at the end (`finish`) the manifest: what ran in which order, with statistics and files,
    plus the run's description RUN_INFO (tool version, module hash, seed, inputs)."""

    def __init__(self, module, directory: Path, pattern=None, summary_only: bool = False,
                 run_info: dict | None = None, prefix: str = ""):
        self.module = module
        self.prefix = prefix                          # before every file name (one of several writers)
        self.dir = Path(directory)
        self.pattern = pattern
        self.summary_only = summary_only
        self.run_info = dict(run_info or {})
        self.entries = []
        self.seq = 0
        self.multi = "devices" in self.run_info       # a multi-device run (its grid in the run's info)

    def __call__(self, ev):
        inst = ev.instruction
        if self.pattern is not None and not (self.pattern.search(inst.name) or self.pattern.search(inst.opcode)):
            return
        self.seq += 1
        safe = re.sub(r"[^\w.\-]", "_", f"{ev.computation.name}.{inst.name}")
        base = f"{self.prefix}{self.seq:06d}_{safe}" + (f".{ev.count}" if ev.count > 1 else "")
        entry = {"order": self.seq, "computation": ev.computation.name, "instruction": inst.name,
                 "opcode": inst.opcode, "shape": inst.shape.to_str(False), "execution": ev.count,
                 "location": f"{inst.loc.file}:{inst.loc.line}:{inst.loc.column}"}
        devices = getattr(ev, "devices", None)        # a multi-device run: the devices of a stacked value
        if devices is None:
            leaf_stats, files = self._write(ev.value, inst.shape, base, None)
            entry["stats"] = leaf_stats
            if self.multi:
                entry["devices"] = "uniform"         # held once: the same on every device running it
        else:
            per, files = [], []
            for pos, d in enumerate(devices):
                one = _row(ev.value, pos)
                leaf_stats, fs = self._write(one, inst.shape, f"{base}.dev{d}", d)
                per.append({"device": int(d), "stats": leaf_stats, **({} if self.summary_only else {"files": fs})})
                files.extend(fs)
            entry["devices"] = [int(d) for d in devices]
            entry["per_device"] = per
        if not self.summary_only:
            entry["files"] = files
        entry.update(source_of(self.module, inst))
        self.entries.append(entry)

    def _write(self, value, shape, base: str, device):
        """Statistics of every leaf of VALUE, and the files written for them (one .npy a leaf)."""
        import numpy as np
        files, leaf_stats = [], []
        for k, (leaf, _shape) in enumerate(leaves_with_shapes(value, shape)):
            leaf = np.asarray(leaf)
            leaf_stats.append(stats(leaf))
            if not self.summary_only:
                name = base + (f".leaf{k}" if shape.is_tuple else "") + ".npy"
                try:
                    written = write_new(self.dir / name, lambda f, a=leaf: save_npy(f, a), "--dump-dir")
                except HloInputError as e:
                    raise DumpFailed(e) from None
                files.append(written.name)
        return leaf_stats, files

    def finish(self, status: str, timings: dict | None = None):
        """Write the manifest (an HloInputError if it cannot be written)."""
        manifest = {"module": self.module.name, "status": status, **self.run_info,
                    "summary_only": self.summary_only}
        if timings:
            manifest["timings"] = timings
        manifest["instructions"] = self.entries
        text = (json.dumps(manifest, indent=1) + "\n").encode()
        replace_file(self.dir / MANIFEST, lambda f: f.write(text), "--dump-dir")


def merge_device_entries(parts: list[tuple[tuple[int, ...], list[dict]]]) -> list[dict]:
    """One manifest's instruction entries from those of several writers, each of which ran the same
    program for some of the devices (PARTS: (devices, entries) in device order): every writer's
    entries in turn, renumbered; a value a writer held once ("uniform") becomes an entry for each of
    its devices, since another writer's devices may hold another value."""
    out = []
    for devices, entries in parts:
        for e in entries:
            e = dict(e)
            if e.get("devices") == "uniform":
                stats = e.pop("stats", None)
                files = e.get("files")
                e["devices"] = [int(d) for d in devices]
                e["per_device"] = [{"device": int(d), "stats": stats, **({} if files is None else {"files": files})}
                                   for d in devices]
            out.append(e)
    for n, e in enumerate(out, 1):
        e["order"] = n
    return out


def _row(value, pos: int):
    """Device POS's value of a value whose array leaves are stacked over devices."""
    if isinstance(value, tuple):
        return tuple(_row(v, pos) for v in value)
    if hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
        return value[pos]
    return value


def _is_plain_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _listed_files(manifest_path: Path) -> set[str]:
    """The file names a manifest of ours lists (none if it is not a readable manifest)."""
    try:
        if not _is_plain_file(manifest_path):
            return set()
        doc = json.loads(manifest_path.read_text())
        return {f for e in doc.get("instructions", []) for f in e.get("files", []) if isinstance(f, str)}
    except (OSError, ValueError, AttributeError, TypeError, UnicodeDecodeError):
        return set()


def _write_marker(d: Path, path: str):
    write_new(d / MARKER, lambda f: f.write(_MARKER_TEXT.encode()), f"--dump-dir {path}")


def prepare_dump_dir(path: str, force: bool, protected: set[str]) -> Path:
    """Create DIR, or reuse it when it is empty or holds an earlier dump of ours (whose files are
    removed, see the module's docstring); a non-empty directory hlo did not create needs FORCE,
    and then nothing in it is replaced.  PROTECTED: resolved paths of this run's inputs, never
    removed.  Every problem is an HloInputError."""
    d = Path(path)
    if not os.path.lexists(d):
        try:
            d.mkdir(parents=True)
        except OSError as e:
            raise HloInputError(f"--dump-dir {path}: cannot create it ({e.strerror or e})") from None
        _write_marker(d, path)
        return d
    if not d.is_dir():
        raise HloInputError(f"--dump-dir {path} exists and is not a directory")
    try:
        names = {f.name for f in d.iterdir()}
    except OSError as e:
        raise HloInputError(f"--dump-dir {path}: cannot list it ({e.strerror or e})") from None
    ours = MARKER in names
    if names and not ours:
        if not force:
            raise HloInputError(f"--dump-dir {path} is not empty and was not made by hlo; refusing to write into "
                                f"it (pass --dump-force to write there anyway; nothing in it is replaced)")
        if MANIFEST in names:
            raise HloInputError(f"--dump-dir {path} already holds a manifest.json that hlo did not write; "
                                f"refusing to replace it")
        return d
    # empty, or an earlier dump of ours: remove the files that dump wrote (and only those)
    doomed = sorted(n for n in _listed_files(d / MANIFEST) & names
                    if OUR_DUMP_FILE.match(n) and _is_plain_file(d / n))
    for n in doomed:
        if str(os.path.realpath(d / n)) in protected:
            raise HloInputError(f"--dump-dir {path} holds {n}, which is an input of this run; refusing to "
                                f"replace it (dump into another directory)")
    for n in doomed:
        try:
            (d / n).unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise HloInputError(f"--dump-dir {path}: cannot remove {n} of the previous dump "
                                f"({e.strerror or e})") from None
    if not ours:
        _write_marker(d, path)
    return d
