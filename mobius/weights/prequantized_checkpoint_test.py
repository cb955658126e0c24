"""A GPTQ / AWQ checkpoint opened as what it is, and bad packed checkpoints refused.

Checkpoints are written by testing/prequantized_checkpoints.py (real safetensors
files + config.json with quantization_config); bad ones are copies with one
tensor dropped or reshaped. Bad input is one line on stderr, nothing written.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mobius.cli import main
from mobius.errors import ConfigError, WeightsError
from mobius.weights.prequantized_checkpoint import (PrequantizedCheckpoint, open_checkpoint,
                                                    source_for)
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from testing.prequantized_checkpoints import awq_config, gptq_config, write_prequantized

UP = "model.layers.0.mlp.up_proj"
K_PROJ = "model.layers.1.self_attn.k_proj"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("prequantized")
    made = {}
    for name, config in {"gptq": gptq_config(4, 32, sym=False, desc_act=True),
                         "awq": awq_config(32)}.items():
        made[name] = write_prequantized(str(root / name), str(root / f"{name}-ref"), config,
                                        intermediate_size=96, attention_bias=True)
    return made


def _open(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return open_checkpoint(folder, json.load(f))


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_packed_linears_read_as_the_float_weights_they_stand_for(checkpoints, method):
    checkpoint = _open(checkpoints[method])
    reference = load_file(os.path.join(checkpoints[method] + "-ref", "model.safetensors"))
    assert isinstance(checkpoint, PrequantizedCheckpoint)
    assert sorted(checkpoint.names()) == sorted(reference)  # qweight & co. appear as .weight
    for name, array in reference.items():
        assert checkpoint.info(name).shape == array.shape
        np.testing.assert_allclose(np.asarray(checkpoint.read(name), np.float32), array,
                                   rtol=0, atol=1e-6, err_msg=name)


def test_what_the_graph_needs_is_known_before_the_codes_are_read(checkpoints):
    gptq, awq = _open(checkpoints["gptq"]), _open(checkpoints["awq"])
    up = gptq.packed(f"{UP}.weight")
    assert (up.out_features, up.in_features, up.bits, up.block_size) == (96, 64, 4, 32)
    assert not up.symmetric and up.g_idx is not None  # asymmetric, act-order
    assert awq.packed(f"{UP}.weight").g_idx is None
    assert gptq.packed("lm_head.weight") is None  # float in the checkpoint


def test_a_fused_slice_takes_its_rows(checkpoints):
    checkpoint = _open(checkpoints["gptq"])
    linear = checkpoint.packed(f"{UP}.weight")
    source = source_for(checkpoint, linear, lambda a: a[10:40].T)
    whole = checkpoint.quantized(f"{UP}.weight")
    part = source.produce()
    np.testing.assert_array_equal(part.codes, whole.codes[10:40])
    np.testing.assert_array_equal(part.scales, whole.scales[10:40])
    assert source.out_features == 30
    assert source_for(checkpoint, linear, lambda a: a.T).rows is None


def test_a_packed_tensor_bound_to_a_non_linear_parameter_is_refused(checkpoints):
    checkpoint = _open(checkpoints["gptq"])
    with pytest.raises(WeightsError, match=f"'{UP}.qweight' is bound to a parameter"):
        source_for(checkpoint, checkpoint.packed(f"{UP}.weight"), None)


def test_declared_quantization_without_packed_tensors_is_refused(tmp_path, checkpoints):
    folder = str(tmp_path / "float")
    shutil.copytree(checkpoints["gptq"] + "-ref", folder)
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    raw["quantization_config"] = gptq_config()
    with pytest.raises(WeightsError,
                       match=r"declares GPTQ quantization but .* \(no \*\.qweight tensor\)"):
        open_checkpoint(folder, raw)


def test_a_float_checkpoint_opens_as_before(checkpoints):
    folder = checkpoints["gptq"] + "-ref"
    with open(os.path.join(folder, "config.json")) as f:
        assert type(open_checkpoint(folder, json.load(f))) is SafetensorsCheckpoint


def test_bad_group_index_is_refused(tmp_path, checkpoints):
    folder = _variant(tmp_path, checkpoints["gptq"], lambda t: t[f"{UP}.g_idx"].__setitem__(0, 7))
    with pytest.raises(WeightsError, match=f"'{UP}.g_idx' has group indices in \\[0, 7\\] "
                                           f"but there are 2 groups"):
        _open(folder)


# ---------------------------------------------------------------------------
# Bad input through the CLI: one line, nothing written
# ---------------------------------------------------------------------------

def _variant(tmp_path, base, change, config_change=None):
    folder = str(tmp_path / "variant")
    shutil.copytree(base, folder)
    path = os.path.join(folder, "model.safetensors")
    tensors = {k: np.array(v) for k, v in load_file(path).items()}
    change(tensors)
    save_file(tensors, path)
    if config_change:
        with open(os.path.join(folder, "config.json")) as f:
            raw = json.load(f)
        config_change(raw["quantization_config"])
        if not raw["quantization_config"]:
            del raw["quantization_config"]
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(raw, f)
    return folder


CASES = {
    "gptq missing qzeros": (
        "gptq", lambda t: t.pop(f"{K_PROJ}.qzeros"), None,
        [f"checkpoint is missing tensor '{K_PROJ}.qzeros'"]),
    "gptq scales of another group count": (
        "gptq", lambda t: t.__setitem__(f"{UP}.scales", np.ones((3, 96), np.float16)), None,
        [f"'{UP}.scales' has shape [3, 96]", "implies [2, 96]", f"{UP}.qweight [8, 96]"]),
    "awq qzeros too narrow": (
        "awq", lambda t: t.__setitem__(f"{UP}.qzeros", np.zeros((2, 6), np.int32)), None,
        [f"'{UP}.qzeros' has shape [2, 6]", "implies [2, 12]"]),
    "gptq group size against the tensors": (
        "gptq", lambda t: None, lambda q: q.update(group_size=16),
        ["'model.layers.0.mlp.down_proj.scales' has shape [3, 64]", "implies [6, 64]"]),
    "packed tensors without quantization_config": (
        "awq", lambda t: None, lambda q: q.clear(),
        ["has packed tensors (e.g. 'model.layers.0.", "no quantization_config"]),
    "bitsandbytes": (
        "gptq", lambda t: None, lambda q: q.update(quant_method="bitsandbytes"),
        ["quant_method 'bitsandbytes' is not supported", "gptq, awq, fp8, mxfp4"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_packed_checkpoint_is_one_line_and_writes_nothing(case, checkpoints, tmp_path,
                                                              capsys):
    method, change, config_change, fragments = CASES[case]
    folder = _variant(tmp_path / "in", checkpoints[method], change, config_change)
    out = tmp_path / "out"
    code = main(["build", "--model", folder, str(out), "--ep", "cpu"])
    err = capsys.readouterr().err
    assert code != 0
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("mobius: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert os.listdir(tmp_path) == ["in"]


def test_config_errors_are_config_errors(checkpoints):
    with pytest.raises(ConfigError):
        open_checkpoint(checkpoints["gptq"], {"quantization_config": {"quant_method": "hqq"}})
