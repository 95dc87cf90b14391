"""The decoded-proto cache: a module proto's IR and text come back from the on-disk cache on a repeat
of the same bytes, exactly as decoding gives them; anything else (other bytes, name or config,
--no-cache, a corrupt entry) decodes."""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.sources import cache, proto, read_modules
from test_cache import cdir  # noqa: F401  (the cache directory fixture: HLO_CACHE_DIR in tmp_path, no bounds)

ROOT = Path(__file__).resolve().parents[2]
PB = ROOT / "samples" / "protos" / "resnet_tiny.hlo.pb"


@pytest.fixture()
def decodes(monkeypatch) -> list:
    """Records the decodes of proto bytes (a miss decodes, a hit does not)."""
    calls = []
    real = proto.decode

    def counting(data, name, text=None):
        calls.append(name)
        return real(data, name, text)
    monkeypatch.setattr(proto, "decode", counting)
    return calls


def same_source(a, b):
    sa, sb = a.modules[0], b.modules[0]
    assert sa.text == sb.text and a.text == b.text
    assert sa.name == sb.name and sa.region == sb.region and a.file_size == b.file_size
    assert sa.module == sb.module
    locs = lambda m: [(i.name, i.loc) for c in m.computations for i in c.instructions]   # noqa: E731
    assert locs(sa.module) == locs(sb.module)


def test_a_repeat_reads_the_decoded_module_back(cdir, decodes):
    first = read_modules(str(PB))
    assert decodes == [str(PB)]
    again = read_modules(str(PB))
    assert decodes == [str(PB)]              # a hit: not decoded again
    same_source(first, again)
    same_source(read_modules(str(PB), use_cache=False), again)


def test_other_bytes_name_or_config_decode(cdir, decodes, tmp_path):
    read_modules(str(PB))
    copy = tmp_path / "copy.hlo.pb"
    copy.write_bytes(PB.read_bytes())
    read_modules(str(copy))                  # the same bytes under another name: its locations differ
    assert decodes == [str(PB), str(copy)]
    data = PB.read_bytes()
    proto.proto_modules(data, str(PB), text=False)
    assert len(decodes) == 2                 # the same bytes, name and (no) config: a hit
    cfg = proto._messages(str(PB))["HloModuleConfigProto"]()
    cfg.replica_count = 2
    fm = proto.proto_modules(data, str(PB), text=False, config=cfg)
    assert len(decodes) == 3
    assert fm.modules[0].module.attrs.get("replica_count") == 2


def test_no_cache_neither_reads_nor_writes(cdir, decodes):
    read_modules(str(PB), use_cache=False)
    read_modules(str(PB), use_cache=False)
    assert len(decodes) == 2
    assert not cdir.exists() or not list(cdir.iterdir())


def test_a_corrupt_entry_is_a_miss_and_is_replaced(cdir, decodes):
    read_modules(str(PB))
    (entry,) = [p for p in cdir.iterdir() if p.suffix == ".hlc"]
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF
    entry.write_bytes(bytes(data))
    fm = read_modules(str(PB))
    assert len(decodes) == 2
    same_source(fm, read_modules(str(PB), use_cache=False))
    read_modules(str(PB))
    assert len(decodes) == 3                 # (the use_cache=False read above) and then a hit again


def test_decoding_errors_propagate_and_are_not_cached(cdir, tmp_path):
    bad = tmp_path / "bad.hlo.pb"
    bad.write_bytes(b"\x08\x96\x01" * 7)
    for _ in range(2):
        with pytest.raises(Exception) as e:
            read_modules(str(bad))
        assert getattr(e.value, "exit_code", None) is not None
    assert not cdir.exists() or not [p for p in cdir.iterdir() if p.suffix == ".hlc"]


def test_the_key_covers_name_config_and_bytes():
    k = cache._proto_key(b"abc", "a.pb", b"")
    assert k != cache._proto_key(b"abd", "a.pb", b"")
    assert k != cache._proto_key(b"abc", "b.pb", b"")
    assert k != cache._proto_key(b"abc", "a.pb", b"\x08\x02")
    assert k == cache._proto_key(b"abc", "a.pb", b"")
