"""pipeline/io.py's writing in place (what the Ray actors use for --output): a file filled by name under
a temporary name and renamed at the end, never left half written; .npy files made to be filled
memory-mapped; an .npz archive made of .npy files, as np.savez makes it."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_cli.errors import HloInputError
from hlo_cli.pipeline.io import new_npy, npz_of_npy_files, replace_file_by_name, row_digest, summarize_row


def test_npz_of_npy_files_filled_in_place(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([True, False, True])
    target = tmp_path / "out.npz"

    def fill(tmp, parts):
        for arr, p in zip((a, b), parts):
            new_npy(p, arr.shape, arr.dtype)
            m = np.lib.format.open_memmap(p, mode="r+")     # (as an actor does, each its tiles)
            m[...] = arr
            m.flush()
            del m
        with open(tmp, "wb") as f:
            npz_of_npy_files(f, {"out0": parts[0], "out1": parts[1]}, chunk=7)
    replace_file_by_name(target, fill, "--output", parts=2)
    with np.load(target) as z:
        assert z.files == ["out0", "out1"] and z["out0"].tobytes() == a.tobytes() and z["out1"].dtype == bool
        assert np.array_equal(z["out1"], b)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]           # no temporary file left


def test_a_failed_fill_leaves_nothing(tmp_path):
    target = tmp_path / "out.npy"
    target.write_bytes(b"before")

    def fill(tmp, parts):
        new_npy(tmp, (4,), np.float32)
        raise OSError(28, "No space left on device")
    with pytest.raises(HloInputError) as e:
        replace_file_by_name(target, fill, "--output out.npy")
    assert "out.npy" in str(e.value)
    assert target.read_bytes() == b"before" and [p.name for p in tmp_path.iterdir()] == ["out.npy"]

    def interrupted(tmp, parts):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        replace_file_by_name(target, interrupted, "--output out.npy", parts=2)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npy"]


def test_row_summaries_group_by_bits():
    x = np.array([0.0, -0.0, 1.5], np.float32)
    s = summarize_row(x)
    assert s.size == 3 and s.stats["max"] == 1.5 and s.head.tolist() == [0.0, -0.0, 1.5]
    assert row_digest(x) == row_digest(x.copy()) != row_digest(np.array([0.0, 0.0, 1.5], np.float32))
    assert summarize_row(np.float32(2.0)).size == 1
