"""L1 for Whisper (task automatic-speech-recognition, two models): every built-in
EP x every dtype it accepts builds the tiny-whisper checkpoint (mobius' own numpy
generator, no torch), both saved models pass the full ONNX checker with strict
shape inference, and their graph I/O is the task's contract
(mobius/tasks/speech_seq2seq.py) with exactly the names genai_config.json gives
onnxruntime-genai. EPs whose registry entry excludes the task (MLX: text
generation only) refuse it up front with a clear error. GroupQueryAttention
never appears in the encoder (role encoder), nor in the decoder (no
attention_mask to take its sequence lengths from), so the KV buffers are not
shared. Also: config.json normalization and the encoder config's checks.
"""

from __future__ import annotations

import json
import os

import onnx
import onnx_ir as ir
import pytest

import mobius
from mobius.request import check_supported
from mobius.ep.registry import ep_registry
from mobius.errors import ConfigError, MobiusError
from mobius.models.registry import family_for
from mobius.models.whisper import FAMILY, WhisperEncoderConfig
from mobius.tasks import speech_seq2seq
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from mobius.weights.dtypes import SHORT_NAMES

TASK = speech_seq2seq.TASK
GQA = "com.microsoft::GroupQueryAttention"
ONNX_DTYPES = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16,
               "bf16": onnx.TensorProto.BFLOAT16}
PRESET = TINY_PRESETS["tiny-whisper"]
LAYERS, HEADS, HEAD_DIM = PRESET["decoder_layers"], PRESET["decoder_attention_heads"], 12
ENCODER_LENGTH = PRESET["max_source_positions"]

CASES = [(caps.name, SHORT_NAMES[d]) for caps in ep_registry
         for d in sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint("tiny-whisper", str(tmp_path_factory.mktemp("ckpt") / "tiny"))


def _dims(value) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value.type.tensor_type.shape.dim]


def _io(graph) -> dict:
    return {v.name: (v.type.tensor_type.elem_type, _dims(v))
            for v in list(graph.input) + list(graph.output)}


@pytest.mark.parametrize("ep,dtype", CASES, ids=[f"{e}-{d}" for e, d in CASES])
def test_builds_and_passes_the_full_checker(checkpoint, tmp_path, ep, dtype):
    caps = mobius.get_ep(ep)
    if caps.tasks is not None and TASK.name not in caps.tasks:
        with pytest.raises(MobiusError,
                           match=rf"EP '{ep}' only runs .* and whisper is a '{TASK.name}'"):
            mobius.build(checkpoint, execution_provider=ep, dtype=dtype)
        return
    package = mobius.build(checkpoint, execution_provider=ep, dtype=dtype)
    assert set(package.models) == {"encoder", "decoder"}
    path = package.save(str(tmp_path / "pkg"))
    assert {"encoder.onnx", "decoder.onnx", "genai_config.json",
            "audio_processor_config.json"} <= set(os.listdir(path))
    float_type = ONNX_DTYPES[dtype]
    int_type = onnx.TensorProto.INT64 if caps.supports_int64 else onnx.TensorProto.INT32
    graphs = {}
    for key in ("encoder", "decoder"):
        file = os.path.join(path, f"{key}.onnx")
        onnx.checker.check_model(file, full_check=True)
        proto = onnx.load(file, load_external_data=False)
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
        assert len(inferred.graph.output) == len(proto.graph.output)
        ops = {(n.domain + "::" if n.domain else "") + n.op_type for n in proto.graph.node}
        assert GQA not in ops, f"{key}: GroupQueryAttention"
        graphs[key] = proto.graph
    _check_encoder(graphs["encoder"], float_type)
    _check_decoder(graphs["decoder"], float_type, int_type)
    with open(os.path.join(path, "genai_config.json")) as f:
        genai = json.load(f)
    _check_genai_names(genai, graphs)
    assert genai["search"]["past_present_share_buffer"] is False


def _check_encoder(graph, float_type):
    batch = "batch_size"
    cross = [f"present_{kind}_cross_{i}" for i in range(LAYERS) for kind in ("key", "value")]
    assert [i.name for i in graph.input] == ["audio_features"]
    assert [o.name for o in graph.output] == ["encoder_hidden_states"] + cross
    io = _io(graph)
    assert io["audio_features"] == (float_type, [batch, PRESET["num_mel_bins"], 2 * ENCODER_LENGTH])
    assert io["encoder_hidden_states"] == (float_type, [batch, ENCODER_LENGTH, PRESET["d_model"]])
    for name in cross:
        assert io[name] == (float_type, [batch, HEADS, ENCODER_LENGTH, HEAD_DIM]), name


def _check_decoder(graph, float_type, int_type):
    batch, seq, past, total = ("batch_size", "sequence_length", "past_sequence_length",
                               "total_sequence_length")
    past_self = [f"past_{kind}_self_{i}" for i in range(LAYERS) for kind in ("key", "value")]
    past_cross = [f"past_{kind}_cross_{i}" for i in range(LAYERS) for kind in ("key", "value")]
    present = [f"present_{kind}_self_{i}" for i in range(LAYERS) for kind in ("key", "value")]
    assert [i.name for i in graph.input] == ["input_ids"] + past_self + past_cross
    assert [o.name for o in graph.output] == ["logits"] + present
    io = _io(graph)
    assert io["input_ids"] == (int_type, [batch, seq])
    assert io["logits"] == (float_type, [batch, seq, PRESET["vocab_size"]])
    for name in past_self:
        assert io[name] == (float_type, [batch, HEADS, past, HEAD_DIM]), name
    for name in past_cross:
        assert io[name] == (float_type, [batch, HEADS, ENCODER_LENGTH, HEAD_DIM]), name
    for name in present:
        assert io[name] == (float_type, [batch, HEADS, total, HEAD_DIM]), name


def _check_genai_names(genai, graphs):
    """Every name genai_config.json hands onnxruntime-genai is the graph's own."""
    model = genai["model"]
    assert model["type"] == "whisper"
    encoder, decoder = model["encoder"], model["decoder"]
    assert (encoder["filename"], decoder["filename"]) == ("encoder.onnx", "decoder.onnx")
    enc_in = [i.name for i in graphs["encoder"].input]
    enc_out = [o.name for o in graphs["encoder"].output]
    dec_in = [i.name for i in graphs["decoder"].input]
    dec_out = [o.name for o in graphs["decoder"].output]
    assert [encoder["inputs"]["audio_features"]] == enc_in
    outputs = encoder["outputs"]
    assert outputs["encoder_hidden_states"] == enc_out[0]
    for i in range(LAYERS):
        assert outputs["cross_present_key_names"] % i in enc_out
        assert outputs["cross_present_value_names"] % i in enc_out
        for key in ("past_key_names", "past_value_names", "cross_past_key_names",
                    "cross_past_value_names"):
            assert decoder["inputs"][key] % i in dec_in, key
        for key in ("present_key_names", "present_value_names"):
            assert decoder["outputs"][key] % i in dec_out, key
    assert decoder["inputs"]["input_ids"] == dec_in[0] and decoder["outputs"]["logits"] == dec_out[0]
    assert (decoder["num_hidden_layers"], decoder["num_attention_heads"], decoder["head_size"]) == (
        LAYERS, HEADS, HEAD_DIM)
    assert decoder["num_key_value_heads"] == HEADS
    assert (encoder["num_hidden_layers"], encoder["num_attention_heads"], encoder["head_size"],
            encoder["hidden_size"]) == (PRESET["encoder_layers"], PRESET["encoder_attention_heads"],
                                        12, PRESET["d_model"])
    assert model["context_length"] == PRESET["max_target_positions"]
    assert model["vocab_size"] == PRESET["vocab_size"]
    assert (model["bos_token_id"], model["eos_token_id"], model["pad_token_id"]) == (1, 2, 0)


def test_mlx_rejects_the_task_before_any_work():
    caps = mobius.get_ep("mlx")
    with pytest.raises(MobiusError, match="only runs text-generation models and whisper is a "):
        check_supported(caps, ir.DataType.FLOAT16, TASK, "whisper")


def test_audio_processor_config_has_the_checkpoint_mel_bins(checkpoint, tmp_path):
    path = mobius.build(checkpoint).save(str(tmp_path / "pkg"))
    with open(os.path.join(path, "audio_processor_config.json")) as f:
        sequence = json.load(f)["feature_extraction"]["sequence"]
    kinds = [step["operation"]["type"] for step in sequence]
    assert kinds == ["AudioDecoder", "STFTNorm", "LogMelSpectrum"]
    assert sequence[2]["operation"]["attrs"]["n_mel"] == PRESET["num_mel_bins"]


# -- config.json ------------------------------------------------------------------


def test_registry_finds_whisper_by_type_and_architecture():
    assert family_for({"model_type": "whisper"}) is FAMILY
    assert family_for({"architectures": ["WhisperForConditionalGeneration"]}) is FAMILY
    assert FAMILY.task == TASK and FAMILY.tiny_preset == "tiny-whisper"


def test_decoder_fields_become_the_architecture_config():
    # WhisperConfig aliases num_hidden_layers / num_attention_heads / hidden_size to the
    # *encoder*: a config.json spelling them must not leak into the decoder's config.
    raw = {**PRESET, "encoder_layers": 3, "encoder_attention_heads": 6,
           "num_hidden_layers": 3, "num_attention_heads": 6, "head_dim": 8}
    config = FAMILY.make_config(raw)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.head_dim) == (48, 2, 4, 4, 12)
    assert config.intermediate_size == PRESET["decoder_ffn_dim"]
    assert config.max_position_embeddings == PRESET["max_target_positions"]
    assert config.hidden_act == "gelu" and config.rms_norm_eps == 1e-5
    assert config.tie_word_embeddings
    encoder = WhisperEncoderConfig.from_options(config.options)
    assert (encoder.num_layers, encoder.num_heads, encoder.ffn_dim, encoder.num_mel_bins,
            encoder.num_frames) == (3, 6, 100, 20, 60)


def test_missing_keys_get_whisper_config_defaults():
    config = FAMILY.make_config({"model_type": "whisper"})
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers,
            config.num_attention_heads, config.max_position_embeddings) == (51865, 384, 4, 6, 448)
    assert config.eos_token_id == (50256,) and config.tie_word_embeddings
    encoder = WhisperEncoderConfig.from_options(config.options)
    assert (encoder.num_mel_bins, encoder.max_source_positions, encoder.num_frames) == (80, 1500, 3000)


@pytest.mark.parametrize("override,message", [
    ({"encoder_attention_heads": 5}, "not divisible by encoder_attention_heads"),
    ({"num_mel_bins": 0}, "'num_mel_bins' must be a positive integer"),
    ({"max_source_positions": "30"}, "'max_source_positions' must be int"),  # config read
])
def test_bad_encoder_config_is_a_config_error(override, message):
    with pytest.raises(ConfigError, match=message):
        FAMILY.module(FAMILY.make_config({**PRESET, **override}))
