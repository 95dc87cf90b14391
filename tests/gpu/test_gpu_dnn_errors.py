"""Malformed cuDNN custom calls are located errors (exit 1, file:line:col, no traceback), checked
before anything runs (no JAX needed)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main

CONV = """HloModule m
ENTRY e {
  x = f32[1,5,5,2] parameter(0)
  w = f32[3,3,3,2] parameter(1)
  c = (f32[1,5,5,3], u8[0]) custom-call(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward"
  ROOT r = f32[1,5,5,3] get-tuple-element(c), index=0
}
"""
TARGET = 'custom_call_target="__cudnn$convForward"'


@pytest.mark.parametrize("old, new, fragment", [
    (", dim_labels=b01f_o01i->b01f", "", "needs dim_labels"),
    (TARGET, TARGET + ', backend_config="garbage"', "backend_config is not the JSON GpuBackendConfig"),
    (TARGET, TARGET + ', backend_config={"cudnn_conv_backend_config":{"conv_result_scale":"zz"}}',
     "option conv_result_scale must be a number, got 'zz'"),
    ("pad=1_1x1_1", "pad=0_0x0_0", "output spatial dim 0 is 5; the window gives 3"),
    ("w = f32[3,3,3,2]", "w = f32[3,3,3,4]", "input features 2 must be filter input features 4"),
    (TARGET, 'custom_call_target="__cudnn$convBiasActivationForward"', "takes 3-4 operands, got 2"),
    (TARGET, 'custom_call_target="__cudnn$convForwardGraph", backend_config={"cudnn_conv_backend_config":'
             '{"serialized_graph":"1:[f32]conv();2:[f32]bogus(1);"}}', "serialized_graph op 'bogus'"),
    ("(f32[1,5,5,3], u8[0])", "(f32[1,5,5,3], f32[2])", "returns (result, ..., u8[scratch])"),
])
def test_malformed_cudnn_convolution(tmp_path, old, new, fragment):
    text = CONV.replace(old, new)
    assert text != CONV
    p = tmp_path / "bad.hlo"
    p.write_text(text)
    r = CliRunner().invoke(main, ["run", str(p), "--random-inputs"])
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert r.exit_code == 1, err
    assert f"{p}:5:3: error: c: __cudnn$" in err and fragment in err
    assert "Traceback" not in err and "internal error" not in err
