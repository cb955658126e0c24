"""genai_config.json for onnxruntime-genai's decoder-only pipeline."""

from __future__ import annotations

from typing import Any, Mapping

from mobius.config.architecture import ArchitectureConfig

# model.type values onnxruntime-genai runs through its generic decoder-only
# pipeline (DecoderOnly_Model; its ModelType::IsLLM list as of 0.18, minus
# "gpt2"). genai refuses any other value ("Unsupported model_type in
# config.json"); "decoder" is its generic spelling, used for every family it
# does not name. "gpt2" is deliberately absent: genai maps it to its legacy
# Gpt_Model, which expects one stacked past/present tensor per layer
# ("past_%d"), not the separate key/value tensors mobius emits.
GENAI_DECODER_TYPES = frozenset({
    "chatglm", "decoder", "ernie4_5", "gemma", "gemma2", "gemma3_text", "gptoss", "granite",
    "internlm2", "lfm2", "lfm2_moe", "llama", "mistral", "nemotron", "olmo", "phi", "phimoe",
    "lfm2_audio_text",  # LFM2-Audio's decoder as a text model (genai's lfm2 conv cache)
    "phi3", "phi3small",
    "qwen2", "qwen3", "smollm3",
    # Qwen 3.5 text: [batch, seq] position_ids; DeltaNet states found by name
    "qwen3_5_text", "qwen3_5_moe_text",
    "granitemoehybrid",  # Mamba2 layers: genai finds their state inputs by name
    "gemma4_text",  # per-layer KV shapes: genai reads each layer's from the model's inputs
})


def genai_model_type(model_type: str) -> str:
    """The genai_config ``model.type`` for a decoder-only HF ``model_type``."""
    return model_type if model_type in GENAI_DECODER_TYPES else "decoder"


def decoder_genai_config(
    config: ArchitectureConfig,
    *,
    filename: str = "model.onnx",
    provider_options: list[dict[str, Any]] | None = None,
    past_present_share_buffer: bool = False,
    extra_session_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    eos = list(config.eos_token_id)
    pad = config.pad_token_id if config.pad_token_id is not None else (eos[0] if eos else 0)
    gen = config.generation
    session_options: dict[str, Any] = {"log_id": "onnxruntime-genai",
                                       "provider_options": provider_options or []}
    session_options.update(extra_session_options or {})
    return {
        "model": {
            "bos_token_id": config.bos_token_id if config.bos_token_id is not None else pad,
            "context_length": config.max_position_embeddings,
            "decoder": {
                "session_options": session_options,
                "filename": filename,
                "head_size": config.head_dim,
                "hidden_size": config.hidden_size,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": config.num_attention_heads,
                "num_hidden_layers": config.num_hidden_layers,
                "num_key_value_heads": config.num_key_value_heads,
            },
            "eos_token_id": eos[0] if len(eos) == 1 else eos,
            "pad_token_id": pad,
            "type": genai_model_type(config.model_type),
            "vocab_size": config.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": gen.do_sample,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": config.max_position_embeddings,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": past_present_share_buffer,
            "repetition_penalty": gen.repetition_penalty,
            "temperature": gen.temperature,
            "top_k": gen.top_k if gen.do_sample else 1,
            "top_p": gen.top_p,
        },
    }


def vision_language_genai_config(
    config: ArchitectureConfig,
    *,
    image_token_id: int,
    provider_options: list[dict[str, Any]] | None = None,
    past_present_share_buffer: bool = False,
    decoder_token_ids: bool = False,
    vision_inputs: tuple[str, ...] = ("pixel_values",),
    extra: Mapping[str, Any] | None = None,
    embeds_width: int | None = None,
) -> dict[str, Any]:
    """genai_config.json of a three-model vision-language package
    (mobius/tasks/vision_language.py): the ``vision`` and ``embedding`` sections
    of genai's multi-modal pipeline, and a decoder fed ``inputs_embeds``.

    ``model.type`` is the checkpoint's own model_type (e.g. "llava"): genai
    picks the image processor and prompt handling by this name, so a type of a
    different family would run its preprocessing on this model. onnxruntime-genai
    0.18 has no "llava" type (its multi-modal types are other families': phi3v,
    gemma3, qwen2_5_vl, mistral3, ...) and refuses to load such a package; its
    multi-modal pipeline itself runs the three models (see
    mobius/models/llava_genai_test.py).

    ``decoder_token_ids``: the decoder also takes input_ids (genai feeds it to a
    decoder that declares it); ``vision_inputs``: the vision model's input names
    (genai's key = the name); ``extra``: further ``model`` keys of the family (its
    ``vision`` mapping is merged into the vision section: Qwen2.5-VL's patch and
    window sizes, the processor's config_filename); ``embeds_width``: the last dim of
    image_features and inputs_embeds when it is not hidden_size (genai allocates both
    as the decoder's ``hidden_size``, which is read for nothing else in these types).
    """
    genai = decoder_genai_config(config, provider_options=provider_options,
                                 past_present_share_buffer=past_present_share_buffer)
    model = genai["model"]
    decoder = model["decoder"]
    inputs = {"inputs_embeds": "inputs_embeds",
              **{k: v for k, v in decoder["inputs"].items()
                 if k != "input_ids" or decoder_token_ids}}
    decoder["inputs"] = inputs
    if embeds_width is not None:
        decoder["hidden_size"] = embeds_width
    # No session_options of their own: genai then gives both the decoder's (graph
    # capture disabled, as it does for every non-decoder session).
    model["embedding"] = {
        "filename": "embedding.onnx",
        "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
        "outputs": {"inputs_embeds": "inputs_embeds"},
    }
    model["vision"] = {
        "filename": "vision.onnx",
        "inputs": {name: name for name in vision_inputs},
        "outputs": {"image_features": "image_features"},
    }
    extra = dict(extra or {})
    model["vision"].update(extra.pop("vision", {}))
    genai_type = extra.pop("type", config.model_type)  # phi4_multimodal: genai's "phi4mm"
    model.update(extra)
    model["image_token_id"] = image_token_id
    model["type"] = genai_type
    return genai


def whisper_genai_config(
    config: ArchitectureConfig,
    encoder: Any,
    *,
    provider_options: list[dict[str, Any]] | None = None,
    past_present_share_buffer: bool = False,
) -> dict[str, Any]:
    """genai_config.json of a two-model Whisper package (mobius/tasks/speech_seq2seq.py):
    onnxruntime-genai's ``whisper`` type, with an ``encoder`` section (audio features
    in; encoder states and every decoder layer's cross-attention K/V out) and a
    ``decoder`` section (self cache in/out, cross cache in). The section layout and
    names are those of genai's own model builder (builders/whisper.py).

    ``config`` describes the decoder; ``encoder`` is the encoder's description
    (``hidden_size``, ``num_heads``, ``num_layers``: mobius.models.whisper's
    WhisperEncoderConfig). ``past_present_share_buffer`` stays False in practice:
    the decoder has no attention_mask, so it never gets GroupQueryAttention, and it
    reads the past length from the self cache's shape, which a shared (max-length)
    buffer would break.
    """
    genai = decoder_genai_config(config, filename="decoder.onnx",
                                 provider_options=provider_options,
                                 past_present_share_buffer=past_present_share_buffer)
    model = genai["model"]
    decoder = model["decoder"]
    decoder["inputs"] = {
        "input_ids": "input_ids",
        "past_key_names": "past_key_self_%d",
        "past_value_names": "past_value_self_%d",
        "cross_past_key_names": "past_key_cross_%d",
        "cross_past_value_names": "past_value_cross_%d",
    }
    decoder["outputs"] = {
        "logits": "logits",
        "present_key_names": "present_key_self_%d",
        "present_value_names": "present_value_self_%d",
    }
    model["encoder"] = {
        "session_options": dict(decoder["session_options"]),
        "filename": "encoder.onnx",
        "head_size": encoder.hidden_size // encoder.num_heads,
        "hidden_size": encoder.hidden_size,
        "inputs": {"audio_features": "audio_features"},
        "outputs": {
            "encoder_hidden_states": "encoder_hidden_states",
            "cross_present_key_names": "present_key_cross_%d",
            "cross_present_value_names": "present_value_cross_%d",
        },
        "num_attention_heads": encoder.num_heads,
        "num_hidden_layers": encoder.num_layers,
        "num_key_value_heads": encoder.num_heads,
    }
    model["type"] = "whisper"
    return genai


def whisper_audio_processor_config(num_mel_bins: int) -> dict[str, Any]:
    """audio_processor_config.json of a Whisper package: what onnxruntime-genai's
    audio processor (``model.create_multimodal_processor()``) runs on raw audio to
    make ``audio_features`` -- decode, STFT (n_fft 400, hop 160: 10 ms at 16 kHz),
    log-mel over 30 s chunks -- as genai's model builder writes it (without the
    Hann-window values it carries only as a ``_comment``)."""
    return {
        "feature_extraction": {
            "sequence": [
                {"operation": {"name": "audio_decoder", "type": "AudioDecoder"}},
                {"operation": {"name": "STFT", "type": "STFTNorm",
                               "attrs": {"n_fft": 400, "frame_length": 400, "hop_length": 160}}},
                {"operation": {"name": "log_mel_spectrogram", "type": "LogMelSpectrum",
                               "attrs": {"chunk_size": 30, "hop_length": 160, "n_fft": 400,
                                         "n_mel": num_mel_bins}}},
            ]
        }
    }
