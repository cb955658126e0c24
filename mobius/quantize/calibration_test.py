"""--quant-calibration: a calibrated int4 build of a tiny random checkpoint is closer to
its float build than RTN's on text like the calibration text, and every bad
calibration request fails naming the file.

The calibration text is the repository's prose (testing/calibration_text);
the logits are compared on a later stretch of it than the calibration reads
(MAX_TOKENS), so the check is of fit to the kind of text, not to its tokens.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import mobius
from mobius.cli import main
from mobius.errors import MobiusError
from mobius.quantize import calibration
from mobius.tiny.checkpoint import make_tiny_checkpoint
from testing import ep_parity
from testing.calibration_text import write_calibration_text


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt")))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    return write_calibration_text(str(tmp_path_factory.mktemp("text") / "prose.txt"))


def _held_out_ids(folder: str, path: str, count: int = 128) -> np.ndarray:
    from tokenizers import Tokenizer

    with open(path, encoding="utf-8") as f:
        text = f.read()
    ids = Tokenizer.from_file(f"{folder}/tokenizer.json").encode(text, add_special_tokens=False).ids
    assert len(ids) > calibration.MAX_TOKENS + count, "the prose no longer outlasts calibration"
    return np.array(ids[-count:], dtype=np.int64)


def _logits(package, ids: np.ndarray) -> np.ndarray:
    feeds = {}
    for value in package.model.graph.inputs:
        if value.name == "input_ids":
            feeds[value.name] = ids[None]
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones((1, len(ids)), np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = np.arange(len(ids))[None]
        else:
            shape = [d if isinstance(d, int) else (1 if i == 0 else 0)
                     for i, d in enumerate(value.shape)]
            feeds[value.name] = np.zeros(shape, np.float32)
    return ep_parity.session(package.model).run(["logits"], feeds)[0]


def test_calibrated_int4_closer_to_float_than_rtn(folder, text_file):
    ids = _held_out_ids(folder, text_file)
    reference = _logits(mobius.build(folder, execution_provider="cpu", prefill_logits="all"), ids)
    errors = {}
    for name, options in (("rtn", {}), ("gptq", {"quant_calibration": text_file})):
        # The token table is RTN either way: keep it float so only calibration differs.
        package = mobius.build(folder, execution_provider="cpu", prefill_logits="all",
                               quant="int4", quant_embedding=False, **options)
        assert sum(n.op_type == "MatMulNBits" for n in package.model.graph) >= 7
        errors[name] = float(np.sqrt(((_logits(package, ids) - reference) ** 2).mean()))
    assert errors["gptq"] < 0.9 * errors["rtn"], errors


def test_calibrated_encoder_builds_and_runs(tmp_path, text_file):
    """An encoder's graph takes ids, mask and token types: it is calibrated too."""
    bert = make_tiny_checkpoint("tiny-bert", str(tmp_path / "bert"))
    package = mobius.build(bert, execution_provider="cpu", quant="int4",
                           quant_calibration=text_file)
    assert any(n.op_type == "MatMulNBits" for n in package.model.graph)
    assert package.save(str(tmp_path / "out"))


def test_tokenizer_truncation_does_not_cut_the_text(folder, tmp_path, text_file):
    """A tokenizer.json that truncates (sentence-transformers ship 128) still yields
    every window of the text."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")
    tokenizer.enable_truncation(16)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    loaded = calibration.load_calibration(text_file, str(tmp_path), 512)
    assert loaded.windows.shape == (calibration.MAX_TOKENS // calibration.WINDOW,
                                    calibration.WINDOW)


def _bytes_file(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("data,message", [
    (None, "no such file"),
    (b" \n\t\n", "the file is empty"),
    (b"caf\xe9 au lait " * 50, "not UTF-8"),
    (b"Too short to calibrate anything.", "calibration needs at least"),
])
def test_bad_calibration_text_fails_naming_the_file(folder, tmp_path, data, message):
    path = (str(tmp_path / "missing.txt") if data is None
            else _bytes_file(tmp_path, "calib.txt", data))
    with pytest.raises(MobiusError, match=message) as error:
        mobius.build(folder, execution_provider="cpu", quant="int4", quant_calibration=path)
    assert path in str(error.value)


def test_calibration_needs_quant(folder, text_file):
    with pytest.raises(MobiusError, match=r"--quant-calibration\) need --quant"):
        mobius.build(folder, quant_calibration=text_file)


def test_calibration_path_type_checked(folder):
    with pytest.raises(TypeError, match="quant_calibration must be a str or path"):
        mobius.build(folder, quant="int4", quant_calibration=3)


def test_cli_refuses_missing_calibration_before_building(folder, tmp_path, capsys):
    missing = str(tmp_path / "nope.txt")
    code = main(["build", "--model", folder, str(tmp_path / "out"), "--quant", "int4",
                 "--quant-calibration", missing, "--quiet"])
    assert code != 0
    assert f"--quant-calibration {missing}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_calibrated_build(folder, tmp_path, text_file):
    out = tmp_path / "out"
    assert main(["build", "--model", folder, str(out), "--quant", "int4",
                 "--quant-calibration", text_file, "--quiet"]) == 0
    model = ir.load(str(out / "model.onnx"))
    assert any(n.op_type == "MatMulNBits" for n in model.graph)


def test_calibration_passes_need_calibration(folder):
    with pytest.raises(MobiusError, match="--quant-calibration-passes needs --quant-calibration"):
        mobius.build(folder, quant="int4", quant_calibration_passes=2)
    with pytest.raises(MobiusError, match=r"--quant-calibration-passes\) need --quant"):
        mobius.build(folder, quant_calibration_passes=2)


def test_calibration_passes_checked_and_carried(folder, text_file):
    with pytest.raises(MobiusError, match="quant_calibration_passes must be at least 1"):
        mobius.build(folder, quant="int4", quant_calibration=text_file, quant_calibration_passes=0)
    loaded = calibration.load_calibration(text_file, folder, 512, passes=3)
    assert loaded.passes == 3
    assert calibration.load_calibration(text_file, folder, 512).passes == calibration.PASSES
