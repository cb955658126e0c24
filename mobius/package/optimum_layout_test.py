"""The Optimum layout: folder contents, the decoder it builds, the encoder-decoders' files
and names, and up-front rejections (what Optimum's classes make of it:
//testing:optimum_test)."""

import os

import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.package.transformers_js import check_layout
from mobius.tiny.checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt")))


def test_folder_holds_what_optimum_reads(llama, tmp_path):
    out = build(llama, execution_provider="cpu", layout="optimum").save(str(tmp_path / "pkg"))
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json",
                                       "mobius_package.json", "model.onnx", "model.onnx.data",
                                       "tokenizer.json", "tokenizer_config.json"]


def test_decoder_has_every_logits_row_and_no_group_query_attention(llama):
    """Optimum reads every position's logits and describes left padding by the mask over
    a cache holding the pads, which GroupQueryAttention reads otherwise; the genai layout
    of the same EP keeps both of its choices."""
    def graph(layout):
        model = build(llama, execution_provider="cpu", layout=layout).model
        logits = next(v for v in model.graph.outputs if v.name == "logits")
        ops = {n.op_type for n in model.graph.all_nodes()}
        return logits.shape[1], "GroupQueryAttention" in ops, {
            v.name: v.dtype for v in model.graph.inputs if not v.name.startswith("past")}

    rows, gqa, inputs = graph("optimum")
    assert str(rows) == "sequence_length" and not gqa
    assert set(inputs) == {"input_ids", "attention_mask", "position_ids"}
    genai_rows, genai_gqa, _ = graph("genai")
    assert genai_rows == 1 and genai_gqa


def _names(values) -> list[str]:
    return [v.name for v in values]


def test_encoder_decoder_files_and_names_are_optimums(tmp_path):
    """t5: encoder_model / decoder_model_merged (use_cache_branch false: the first step,
    which takes the encoder's states and returns both caches; true: fed each layer's
    decoder then encoder cache)."""
    ckpt = make_tiny_checkpoint("tiny-t5", str(tmp_path / "ckpt"))
    package = build(ckpt, execution_provider="cpu", layout="optimum")
    out = package.save(str(tmp_path / "pkg"))
    assert {"encoder_model.onnx", "decoder_model_merged.onnx", "config.json"} <= set(
        os.listdir(out))
    assert sorted(package.models) == ["decoder_model_merged", "encoder_model"]
    encoder, decoder = (package.models[k].graph for k in ("encoder_model", "decoder_model_merged"))
    assert _names(encoder.inputs) == ["input_ids", "attention_mask"]
    assert _names(encoder.outputs) == ["last_hidden_state"]
    cache = [f"{i}.{a}.{p}" for i in range(2) for a in ("decoder", "encoder")
             for p in ("key", "value")]
    assert _names(decoder.inputs) == ["input_ids", "encoder_attention_mask",
                                      "encoder_hidden_states",
                                      *(f"past_key_values.{c}" for c in cache),
                                      "use_cache_branch"]
    assert _names(decoder.outputs) == ["logits", *(f"present.{c}" for c in cache
                                                   if ".decoder." in c),
                                       *(f"present.{c}" for c in cache if ".encoder." in c)]
    # Optimum sizes the empty past it feeds the first step hidden / heads wide (not d_kv)
    assert [d if isinstance(d, int) else None for d in decoder.inputs[3].shape] == [
        None, None, None, None]


def test_whisper_encoder_takes_input_features(tmp_path):
    ckpt = make_tiny_checkpoint("tiny-whisper", str(tmp_path / "ckpt"))
    models = build(ckpt, execution_provider="cpu", layout="optimum").models
    assert sorted(models) == ["decoder_model_merged", "encoder_model"]
    assert _names(models["encoder_model"].graph.inputs) == ["input_features"]
    assert "encoder_attention_mask" not in _names(models["decoder_model_merged"].graph.inputs)


@pytest.mark.parametrize("kwargs,message", [
    ({"task": "image-text-to-text"}, "'image-text-to-text'"),
    ({"task": "automatic-speech-recognition-ctc"}, "'automatic-speech-recognition-ctc'"),
    ({"logits_to_keep": True}, "ORTModelForCausalLM does not feed it"),
])
def test_rejections(kwargs, message):
    with pytest.raises(MobiusError, match=message):
        check_layout("optimum", "f32", **kwargs)


def test_cli_rejects_logits_to_keep_before_reading_the_model(tmp_path, capsys):
    from mobius.cli import main

    out = tmp_path / "out"
    code = main(["build", "--model", str(tmp_path / "missing"), str(out), "--layout", "optimum",
                 "--logits-to-keep"])
    assert code == 1 and "num_logits_to_keep" in capsys.readouterr().err and not out.exists()
