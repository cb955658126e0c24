"""The Optimum package layout (``mobius build --layout optimum``).

Optimum's ``optimum.onnxruntime.ORTModelFor*`` classes load a model folder holding
``config.json`` (the class and the cache sizes come from it) and ``model.onnx``
with the I/O names mobius already writes: ``input_ids``, ``attention_mask``,
``position_ids``, ``past_key_values.{i}.key`` / ``.value`` in, ``logits`` and
``present.{i}.key`` / ``.value`` out; encoders ``last_hidden_state`` or
``logits``. The default (genai) folder already loads for encoders; for decoders
Optimum's contract differs from onnxruntime-genai's in two ways this layout
builds for:

* its forward returns every position's logits, as transformers does, and it
  never feeds ``num_logits_to_keep`` (refused here);
* a left-padded batch is described by ``attention_mask`` alone, over a cache
  that holds the pad positions; GroupQueryAttention reads the mask as the count
  of valid cache rows from the start (genai's right-aligned cache), so the
  layout builds attention without it (measured on the cpu EP: the GQA
  package's padded-row decode logits are 3.6e-3 off transformers', its greedy
  tokens diverge on another checkpoint; without GQA they match within 1e-5).

Encoder-decoders (``ORTModelForSeq2SeqLM``: t5, mt5, bart, marian;
``ORTModelForSpeechSeq2Seq``: whisper) are built as three graphs:
``encoder_model`` (-> ``last_hidden_state``; whisper's input is
``input_features``), ``decoder_model`` (the first step: it takes
``encoder_hidden_states`` and returns ``present.{i}.encoder.*`` beside
``present.{i}.decoder.*``) and ``decoder_with_past_model`` (fed
``past_key_values.{i}.decoder.*`` / ``.encoder.*``, in that per-layer order, the
order Optimum zips its cache with). The task builds that split
(mobius/tasks/cross_kv_split.py); this module names its files and I/O; the two
decoders are then written as one ``decoder_model_merged.onnx``
(mobius/package/merged_decoder.py), which Optimum and transformers.js load.

No genai_config.json is written: the folder is not tuned for onnxruntime-genai.
"""

from __future__ import annotations

import dataclasses
import re

from mobius.ep.capabilities import EpCapabilities
from mobius.errors import MobiusError

OPTIMUM = "optimum"
#: tasks mobius builds whose ORTModelFor* class loads a single model.onnx
#: (ORTModelForCausalLM, ...FeatureExtraction, ...SequenceClassification,
#: ...TokenClassification, ...MaskedLM, ...ImageClassification)
TASKS = ("text-generation", "feature-extraction", "text-classification",
         "token-classification", "fill-mask", "image-classification")
#: encoder-decoder tasks (ORTModelForSeq2SeqLM, ...SpeechSeq2Seq): package key -> file
SEQ2SEQ = ("text2text-generation", "automatic-speech-recognition")
SEQ2SEQ_FILES = {"encoder": "encoder_model", "first_step": "decoder_model",
                 "decoder": "decoder_with_past_model"}
_CACHE = r"(past|present)_(key|value)_(self|cross)_(\d+)"
_CACHE_NAME = {"past": "past_key_values", "present": "present",
               "self": "decoder", "cross": "encoder"}
#: the encoder's I/O names Optimum reads otherwise (the decoders': cache names only)
ENCODER_NAMES = {"encoder_hidden_states": "last_hidden_state",
                 "audio_features": "input_features"}


def check_optimum(task: str | None = None, logits_to_keep: bool | None = None) -> None:
    """Rejects a task Optimum's single-file classes do not load, and num_logits_to_keep,
    which Optimum never feeds."""
    if task is not None and task not in TASKS + SEQ2SEQ:
        raise MobiusError(f"the optimum layout holds {', '.join(TASKS + SEQ2SEQ)} models; "
                          f"this is a {task!r} model")
    if logits_to_keep:
        raise MobiusError("the optimum layout cannot hold num_logits_to_keep: "
                          "ORTModelForCausalLM does not feed it")


def optimum_capabilities(caps: EpCapabilities) -> EpCapabilities:
    """The EP as Optimum sees it: attention over a left-padded cache (no
    GroupQueryAttention), int64 token ids, masks and positions."""
    return dataclasses.replace(caps, gqa_dtypes=frozenset(), qkv_pack_dtypes=frozenset(),
                               gqa_sliding_window_cache=False, gqa_head_sink=False,
                               supports_int64=True)


def to_optimum_names(package) -> None:
    """Gives an encoder-decoder package Optimum's file and I/O names and its per-layer
    cache order (other tasks' names are Optimum's already)."""
    if package.task not in SEQ2SEQ:
        return
    models = {}
    for key, model in package.models.items():
        graph = model.graph
        for value in (*graph.inputs, *graph.outputs):
            value.name = (ENCODER_NAMES.get(value.name, value.name) if key == "encoder"
                          else re.sub(f"^{_CACHE}$", _cache_name, value.name))
        ordered = sorted(graph.inputs, key=_feed_order)
        graph.inputs.clear()
        graph.inputs.extend(ordered)
        models[SEQ2SEQ_FILES[key]] = model
    package.models = models


def _cache_name(match: re.Match) -> str:
    """past_key_self_3 -> past_key_values.3.decoder.key (present_* -> present.3...)."""
    kind, part, attention, layer = match.groups()
    return f"{_CACHE_NAME[kind]}.{layer}.{_CACHE_NAME[attention]}.{part}"


def _feed_order(value) -> tuple:
    """Other inputs first, then each layer's decoder key, value, encoder key, value."""
    match = re.fullmatch(r"past_key_values\.(\d+)\.(decoder|encoder)\.(key|value)", value.name)
    if match is None:
        return (0,)
    layer, attention, part = match.groups()
    return (1, int(layer), attention == "encoder", part == "value")
