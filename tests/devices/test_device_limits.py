"""Hostile device counts: refused before the run with exit code 4 and what they would need."""
from __future__ import annotations

from pathlib import Path

from run_harness import hlo  # noqa: F401  (the fixture)

MODULE = """HloModule big, num_partitions=4

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  a = f32[1000] parameter(0)
  ROOT r = f32[1000] all-reduce(a), channel_id=1, replica_groups={}, to_apply=add
}
"""


def test_a_device_count_no_machine_holds_is_refused(hlo):
    Path("big.hlo").write_text(MODULE)
    r = hlo("run", "big.hlo", "--random-inputs", "--partitions", "1000000000000")
    assert r.exit_code == 4, r.output
    assert "1000000000000 simulated devices need more than this machine can ever hold" in r.stderr


def test_results_too_large_for_the_devices_together_are_refused(hlo):
    Path("big.hlo").write_text(MODULE)
    r = hlo("run", "big.hlo", "--random-inputs", "--partitions", "100000000", "--format", "json")
    assert r.exit_code == 4, r.output
    # (on a machine of less than 6 GB the device count alone is refused first)
    assert ("on 100000000 devices needs 400,000,000,000 bytes" in r.stdout
            or "100000000 simulated devices need more" in r.stdout)
    assert "more than this machine can ever hold" in r.stdout
