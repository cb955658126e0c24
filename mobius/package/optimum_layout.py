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

No genai_config.json is written: the folder is not tuned for onnxruntime-genai.
"""

from __future__ import annotations

import dataclasses

from mobius.ep.capabilities import EpCapabilities
from mobius.errors import MobiusError

OPTIMUM = "optimum"
#: tasks mobius builds whose ORTModelFor* class loads a single model.onnx
#: (ORTModelForCausalLM, ...FeatureExtraction, ...SequenceClassification,
#: ...TokenClassification, ...MaskedLM, ...ImageClassification)
TASKS = ("text-generation", "feature-extraction", "text-classification",
         "token-classification", "fill-mask", "image-classification")


def check_optimum(task: str | None = None, logits_to_keep: bool | None = None) -> None:
    """Rejects a task Optimum's single-file classes do not load, and num_logits_to_keep,
    which Optimum never feeds."""
    if task is not None and task not in TASKS:
        raise MobiusError(f"the optimum layout holds {', '.join(TASKS)} models; "
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
