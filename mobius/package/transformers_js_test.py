"""The transformers.js layout: folder contents, int64 I/O, and up-front rejections."""

import json
import os

import onnx
import onnx_ir as ir
import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.package.transformers_js import check_layout, generation_config
from mobius.tiny.checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt")))


def test_folder_holds_what_transformers_js_reads(llama, tmp_path):
    out = build(llama, execution_provider="webgpu", layout="transformers.js").save(
        str(tmp_path / "pkg"))
    files = sorted(os.path.relpath(os.path.join(d, f), out)
                   for d, _, names in os.walk(out) for f in names)
    assert files == ["config.json", "generation_config.json", "mobius_package.json",
                     "onnx/model.onnx", "onnx/model.onnx_data", "tokenizer.json",
                     "tokenizer_config.json"]
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "llama"
    assert config["transformers.js_config"] == {
        "dtype": "fp32", "use_external_data_format": {"model.onnx": 1}}
    model = onnx.load(os.path.join(out, "onnx", "model.onnx"), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data
                 if e.key == "location"}
    assert locations == {"model.onnx_data"}


def test_image_folder_holds_its_processor(tmp_path):
    """An image task's preprocessor_config.json (the task writes it) is what
    transformers.js' AutoProcessor reads."""
    ckpt = make_tiny_checkpoint("tiny-vit-img-cls", str(tmp_path / "ckpt"))
    out = build(ckpt, execution_provider="webgpu", layout="transformers.js").save(
        str(tmp_path / "pkg"))
    assert {"config.json", "preprocessor_config.json", "onnx"} <= set(os.listdir(out))
    with open(os.path.join(out, "preprocessor_config.json")) as f:
        assert json.load(f)["image_processor_type"] == "ViTImageProcessor"
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["id2label"]["0"] == "tabby"
    assert sorted(os.listdir(os.path.join(out, "onnx"))) == ["model.onnx", "model.onnx_data"]


def test_webgpu_keeps_int64_io_in_this_layout(llama):
    """transformers.js feeds int64 ids; the genai layout of the same EP gets int32 I/O."""
    def input_types(layout):
        model = build(llama, execution_provider="webgpu", layout=layout).model
        return {v.name: v.dtype for v in model.graph.inputs if not v.name.startswith("past")}

    assert set(input_types("transformers.js").values()) == {ir.DataType.INT64}
    assert set(input_types("genai").values()) == {ir.DataType.INT32}


def test_f16_file_name(llama, tmp_path):
    out = build(llama, execution_provider="webgpu", dtype="f16",
                layout="transformers.js").save(str(tmp_path / "pkg"))
    assert sorted(os.listdir(os.path.join(out, "onnx"))) == ["model_fp16.onnx",
                                                             "model_fp16.onnx_data"]


@pytest.mark.parametrize("dtype,quant,name,js,bits", [
    ("f32", "int4", "model_q4", "q4", 4), ("f16", "int4", "model_q4f16", "q4f16", 4),
    ("f32", "int8", "model_quantized", "q8", 8)])
def test_quantized_file_names_are_transformers_js_dtypes(llama, tmp_path, dtype, quant, name,
                                                         js, bits):
    out = build(llama, execution_provider="webgpu", dtype=dtype, quant=quant,
                layout="transformers.js").save(str(tmp_path / "pkg"))
    assert sorted(os.listdir(os.path.join(out, "onnx"))) == [f"{name}.onnx", f"{name}.onnx_data"]
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["transformers.js_config"]["dtype"] == js
    model = onnx.load(os.path.join(out, "onnx", f"{name}.onnx"), load_external_data=False)
    found = {a.i for n in model.graph.node if n.op_type == "MatMulNBits"
             for a in n.attribute if a.name == "bits"}
    assert bits in found and found <= {bits, 8}, found  # int4: an 8-bit lm_head by default


def test_generation_config_from_config_when_checkpoint_has_none():
    assert generation_config({"bos_token_id": 1, "eos_token_id": [2, 5], "pad_token_id": None},
                             {}) == {"bos_token_id": 1, "eos_token_id": [2, 5]}
    assert generation_config({"bos_token_id": 1}, {"eos_token_id": 7}) == {"eos_token_id": 7}


@pytest.mark.parametrize("layout,dtype,task,quant,message", [
    ("onnxjs", "f32", None, None, "unknown layout 'onnxjs'"),
    ("transformers.js", "bf16", None, None, "not bf16"),
    ("transformers.js", "f32", "automatic-speech-recognition-ctc", None,
     "'automatic-speech-recognition-ctc'"),
    ("transformers.js", "f32", None, "int3", "not int3"),
    ("transformers.js", "f16", None, "int8", "no int8 f16 dtype"),
])
def test_rejections(layout, dtype, task, quant, message):
    with pytest.raises(MobiusError, match=message):
        check_layout(layout, dtype, task, quant)


def test_cli_rejects_bf16_before_reading_the_model(tmp_path, capsys):
    from mobius.cli import main

    out = tmp_path / "out"
    code = main(["build", "--model", str(tmp_path / "missing"), str(out), "--dtype", "bf16",
                 "--layout", "transformers.js"])
    assert code == 1 and "not bf16" in capsys.readouterr().err and not out.exists()


def test_encoder_decoder_folder_states_is_encoder_decoder(tmp_path):
    """transformers.js builds an encoder-decoder's empty cache only when config.json says
    is_encoder_decoder, which mobius' tiny t5 config (like transformers' defaults) omits."""
    ckpt = make_tiny_checkpoint("tiny-t5", str(tmp_path / "ckpt"))
    with open(os.path.join(ckpt, "config.json")) as f:
        assert "is_encoder_decoder" not in json.load(f)
    out = build(ckpt, execution_provider="webgpu", layout="transformers.js").save(
        str(tmp_path / "pkg"))
    assert sorted(os.listdir(os.path.join(out, "onnx"))) == [
        "decoder_model_merged.onnx", "decoder_model_merged.onnx_data",
        "encoder_model.onnx", "encoder_model.onnx_data"]
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["is_encoder_decoder"] is True
