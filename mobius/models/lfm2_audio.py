"""LFM2-Audio (Lfm2AudioForConditionalGeneration, LiquidAI/LFM2-Audio-*): its LFM2 text
decoder, as onnxruntime-genai's ``lfm2_audio_text`` type runs it.

The checkpoint is liquid-audio's, not transformers': config.json has no model_type and
nests the decoder's Lfm2Config under ``lfm``, beside the audio encoder (``encoder``), the
depthformer that samples audio codes (``depthformer``), the mel front end
(``preprocessor``) and the codebook settings. The decoder is mobius/models/lfm2.py under the
``lfm.`` prefix (an Lfm2Model: ``lfm.embed_tokens``, ``lfm.layers.{i}``,
``lfm.embedding_norm``); its text logits are always the token embedding's transpose
(liquid-audio projects on ``lfm.embed_tokens.weight`` whatever ``tie_embedding`` says, and
the checkpoint has no head of its own). The package is the text model: input_ids in, text
logits out, the conv states of mobius/models/lfm2.py. Two tokens hand the turn to speech
(128 ``<|audio_start|>``, 130 ``<|text_end|>``): what follows is audio codes for the
depthformer, which the package does not hold, so both are end-of-sequence tokens in
genai_config.json, as in ORT GenAI's builder.

Left out, each declared unread (the error names any other tensor): the Conformer audio
encoder and its adapter, the audio-code embeddings, the depthformer with its input
projection and per-codebook embeddings, and the codebook buffers. genai's ``lfm2_audio``
type (the decoder stage of its audio pipeline, fed inputs_embeds by an audio embedding
model) needs those parts as ONNX models; mobius does not build them.

Peer check (measured once, not a test): ORT GenAI 0.18's builder (``-p fp32 -e cpu``) on
the ``lfm2_audio`` checkpoint of peer_families_cases.py writes the same type and eos ids;
its logits and mobius' cpu package's agree to 6.6e-7 (logits up to 1.6) over a 6-token
prompt, and genai greedy-decodes the same tokens from both.
"""

from __future__ import annotations

from typing import Any, Mapping

from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import lfm2
from mobius.models.family import ModelFamily
from mobius.weights.attach import IgnoredTensors

ARCHITECTURE = "Lfm2AudioForConditionalGeneration"
#: genai's text-only type for these checkpoints (its "lfm2_audio" is the pipeline's stage)
GENAI_TYPE = "lfm2_audio_text"
#: <|audio_start|> (a spoken answer follows), <|text_end|> (interleaved speech follows)
MODALITY_SWITCH_TOKENS = (128, 130)
#: the checkpoint's parts around the decoder (liquid-audio's LFM2AudioModel attributes)
AUDIO_PARTS = ("conformer", "audio_adapter", "audio_embedding", "depthformer", "depth_linear",
               "depth_embeddings", "codebook_offsets", "audio_loss_weights")


def normalize_lfm2_audio(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The ``lfm`` section as an LFM2 config (mobius/models/lfm2.py), tied logits, the
    modality switch tokens added to eos."""
    text = raw.get("lfm")
    if not isinstance(text, dict):
        raise ConfigError("config.json: LFM2-Audio needs an 'lfm' object (the LFM2 decoder's "
                          f"config), got {type(text).__name__}")
    if text.get("model_type", "lfm2") != "lfm2":
        raise UnsupportedModelError(f"lfm2_audio: lfm model_type {text['model_type']!r} is "
                                    f"not supported; supported: lfm2")
    out = lfm2.normalize({**text, "model_type": "lfm2"})
    eos = out.get("eos_token_id")
    eos = [] if eos is None else list(eos) if isinstance(eos, list) else [eos]
    out.update(model_type=GENAI_TYPE, architectures=[ARCHITECTURE], tie_word_embeddings=True,
               eos_token_id=eos + [t for t in MODALITY_SWITCH_TOKENS if t not in eos])
    return out


class Lfm2AudioForCausalLM(lfm2.Lfm2ForCausalLM):
    """The LFM2 decoder under ``lfm.``, its head the token embedding."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config, body_attribute="lfm")


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    parts = "|".join(AUDIO_PARTS)
    return (IgnoredTensors(rf"({parts})(\..*)?",
                           "the audio encoder, audio-code embeddings and depthformer around "
                           "the LFM2 decoder: the package is the text model"),)


FAMILY = ModelFamily(
    name="lfm2_audio",
    model_types=(GENAI_TYPE,),
    architectures=(ARCHITECTURE,),
    module=Lfm2AudioForCausalLM,
    normalize_raw=normalize_lfm2_audio,
    config_overrides=lfm2.overrides,
    tiny_preset="tiny-lfm2-audio",
    ignored_tensors=_unread,
    unread_config=("encoder", "depthformer", "preprocessor"),
)

# LFM2-Audio: the tiny-lfm2 hybrid decoder (conv, attention, conv) as the "lfm" section; a
# 2-codebook, 2-layer depthformer and a 2-layer Conformer, whose tensors the test
# checkpoint (peer_families_cases.py) adds for the family to leave unread.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-lfm2-audio": {
        "architectures": [ARCHITECTURE], "codebooks": 2, "tie_audio_embeddings": False,
        "semantic_codebook_factor": 100, "codebook_weight": "log",
        "interleaved_n_text": 6, "interleaved_n_audio": 12,
        "preprocessor": {"sample_rate": 16000, "features": 16, "n_fft": 64,
                         "window_size": 0.025, "window_stride": 0.01},
        "encoder": {"feat_in": 16, "n_layers": 2, "d_model": 40, "n_heads": 2,
                    "subsampling_factor": 8, "ff_expansion_factor": 2},
        "lfm": {**{k: v for k, v in lfm2.TINY_PRESETS["tiny-lfm2"].items()
                   if k != "architectures"}, "tie_embedding": True},
        "depthformer": {"layers": 2, "dim": 24, "tie": True},
    },
}
