"""L1: every registered family builds from a transformers-made tiny checkpoint in f32,
f16 and bf16, the saved model passes the full ONNX checker (with strict shape
inference), and its graph I/O is exactly DESIGN.md's contract.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mobius.models.registry import FAMILIES  # noqa: E402
from testing.model_runs import build_package, make_family_checkpoint  # noqa: E402

DTYPES = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16,
          "bf16": onnx.TensorProto.BFLOAT16}
INT64 = onnx.TensorProto.INT64


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One transformers-written tiny checkpoint per family, made on first use."""
    made = {}

    def get(family):
        if family.name not in made:
            folder = tmp_path_factory.mktemp(f"ckpt-{family.name}")
            made[family.name] = make_family_checkpoint(str(folder), family)
        return made[family.name]

    return get


def _dims(value_info) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value_info.type.tensor_type.shape.dim]


def _elem(value_info) -> int:
    return value_info.type.tensor_type.elem_type


def test_every_family_has_a_tiny_preset():
    assert len(FAMILIES) >= 4
    for family in FAMILIES:
        assert family.tiny_preset, family.name


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_builds_and_passes_the_full_checker(family, dtype, checkpoints, tmp_path):
    assert family.tiny_preset, f"{family.name} has no tiny preset to test with"
    built = build_package(checkpoints(family), tmp_path / "pkg", dtype=dtype)
    if family.task == "automatic-speech-recognition":  # encoder.onnx + decoder.onnx, no model.onnx
        _check_speech_seq2seq(built, dtype)
        return
    # Full check on the saved file: external data resolved, strict shape inference.
    onnx.checker.check_model(built.model_path, full_check=True)
    model = onnx.load(built.model_path, load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    assert len(inferred.graph.output) == len(model.graph.output)
    if family.task == "text-generation":
        _check_decoder_contract(model.graph, built.config, DTYPES[dtype])
    elif family.task == "feature-extraction":
        _check_encoder_contract(model.graph, built.config, DTYPES[dtype])
    elif family.task == "image-text-to-text":
        _check_vision_language_contract(built, model.graph, DTYPES[dtype])
    else:
        pytest.fail(f"no I/O contract known for task {family.task!r}")
    _check_weight_dtypes(model.graph, dtype)


def _check_weight_dtypes(graph, dtype):
    """Weights are stored in the build dtype.

    Exception: where the EP has no kernels for the dtype (bf16 on the default EP),
    the Float32Compute lowering casts weights to float32 where they enter, and
    constant folding turns the casts of small weights into float32 initializers;
    the large ones (the embedding table at least) must still be in the build dtype.
    """
    from mobius.ep.registry import get_ep
    from mobius.weights.dtypes import parse_dtype

    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    weights = [i for i in graph.initializer if i.data_type in float_types]
    stray = sorted(i.name for i in weights if i.data_type != DTYPES[dtype])
    if get_ep("default").computes(parse_dtype(dtype)):
        assert not stray, f"initializers not in {dtype}: {stray[:5]}"
        return
    assert all(name.endswith("_float32") for name in stray), stray[:5]
    largest = max(weights, key=lambda i: int(np.prod(i.dims)))
    assert largest.data_type == DTYPES[dtype], f"{largest.name} is not stored in {dtype}"


def _check_decoder_contract(graph, config, float_type):
    layers = config.num_hidden_layers
    inputs = [i.name for i in graph.input]
    past = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    present = [f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    # position_ids is optional in the contract (absent where RoPE is absorbed).
    expected = ["input_ids", "attention_mask"] + (
        ["position_ids"] if "position_ids" in inputs else []) + past
    assert inputs == expected
    assert [o.name for o in graph.output] == ["logits"] + present

    by_name = {v.name: v for v in list(graph.input) + list(graph.output)}
    for name in ("input_ids", "attention_mask", "position_ids"):
        if name in by_name:
            assert _elem(by_name[name]) == INT64, name
            assert len(_dims(by_name[name])) == 2
            assert all(isinstance(d, str) and d for d in _dims(by_name[name])), name
    batch, seq = _dims(by_name["input_ids"])
    _, total = _dims(by_name["attention_mask"])
    assert len({batch, seq, total}) == 3  # three distinct symbolic dims

    logits = _dims(by_name["logits"])
    assert _elem(by_name["logits"]) == float_type
    assert logits == [batch, seq, config.vocab_size]
    kv, head_dim = config.num_key_value_heads, config.head_dim
    past_len = None
    for name in past:
        dims = _dims(by_name[name])
        assert _elem(by_name[name]) == float_type, name
        assert dims[0] == batch and dims[1] == kv and dims[3] == head_dim, (name, dims)
        assert isinstance(dims[2], str) and dims[2] not in (batch, seq, total), (name, dims)
        past_len = past_len or dims[2]
        assert dims[2] == past_len
    for name in present:
        assert _elem(by_name[name]) == float_type, name
        assert _dims(by_name[name]) == [batch, kv, total, head_dim], name


def _check_encoder_contract(graph, config, float_type):
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in graph.output] == ["last_hidden_state"]
    for value in graph.input:
        assert _elem(value) == INT64
    out = graph.output[0]
    assert _elem(out) == float_type
    assert _dims(out)[-1] == config.hidden_size


def _check_vision_language_contract(built, decoder, float_type):
    """vision.onnx / embedding.onnx / model.onnx (mobius/tasks/vision_language.py);
    the details per EP are in llava_test.py."""
    import os

    graphs = {}
    for name in ("vision", "embedding"):
        path = os.path.join(built.path, f"{name}.onnx")
        onnx.checker.check_model(path, full_check=True)
        graphs[name] = onnx.load(path, load_external_data=False).graph
    vision, embedding = graphs["vision"], graphs["embedding"]
    assert [i.name for i in vision.input] == ["pixel_values"]
    assert [o.name for o in vision.output] == ["image_features"]
    assert [i.name for i in embedding.input] == ["input_ids", "image_features"]
    assert [o.name for o in embedding.output] == ["inputs_embeds"]
    assert _elem(vision.output[0]) == _elem(embedding.output[0]) == float_type
    layers = built.config.num_hidden_layers
    past = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    assert [i.name for i in decoder.input] == [
        "inputs_embeds", "attention_mask", "position_ids", *past]
    assert [o.name for o in decoder.output][0] == "logits"
    assert _dims(decoder.output[0])[-1] == built.config.vocab_size


def _check_speech_seq2seq(built, dtype):
    """encoder.onnx / decoder.onnx (mobius/tasks/speech_seq2seq.py): full checker, I/O
    names, weight dtypes; the details per EP are in whisper_test.py."""
    import os

    float_type = DTYPES[dtype]
    layers = built.config.num_hidden_layers
    cross = [f"{{}}_{kind}_cross_{i}" for i in range(layers) for kind in ("key", "value")]
    self_kv = [f"{{}}_{kind}_self_{i}" for i in range(layers) for kind in ("key", "value")]
    expected = {
        "encoder": (["audio_features"],
                    ["encoder_hidden_states", *(n.format("present") for n in cross)]),
        "decoder": (["input_ids", *(n.format("past") for n in self_kv + cross)],
                    ["logits", *(n.format("present") for n in self_kv)]),
    }
    for name, (inputs, outputs) in expected.items():
        path = os.path.join(built.path, f"{name}.onnx")
        onnx.checker.check_model(path, full_check=True)
        graph = onnx.load(path, load_external_data=False).graph
        assert [i.name for i in graph.input] == inputs, name
        assert [o.name for o in graph.output] == outputs, name
        assert all(_elem(o) == float_type for o in graph.output), name
        if name == "decoder":
            _check_weight_dtypes(graph, dtype)
        else:  # as _check_weight_dtypes, but the tiny encoder has no weight too large to fold
            stray = [i.name for i in graph.initializer
                     if i.data_type in DTYPES.values() and i.data_type != float_type]
            assert all(n.endswith("_float32") for n in stray) and (not stray or dtype == "bf16"), \
                stray[:5]


def test_unknown_model_type_lists_the_supported_ones():
    from mobius.errors import UnsupportedModelError
    from mobius.models.registry import family_for, supported_model_types

    with pytest.raises(UnsupportedModelError) as info:
        family_for({"model_type": "not-a-model", "architectures": ["NopeForCausalLM"]})
    message = str(info.value)
    assert "'not-a-model'" in message
    for model_type in supported_model_types():
        assert re.search(rf"\b{re.escape(model_type)}\b", message)
