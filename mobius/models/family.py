"""ModelFamily: what the registry knows about one HF model family."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from onnxscript import nn

from mobius.components.mtp_head import MtpTensors
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.tasks import causal_lm
from mobius.tasks.task import Task
from mobius.weights.attach import IgnoredTensors

#: the shared test suites a family joins by naming them in ``cohorts`` (their
#: parametrization reads the registry, so joining is one word in the family file)
COHORTS = {
    "genai": "a decoder that onnxruntime-genai greedy-decodes on a checkpoint with every "
             "parameter random, token for token with transformers "
             "(mobius/models/dense_families_genai_test.py)",
    "every-dtype": "built by the EP suites (ep/) in every dtype of every EP, not only in each "
                   "EP's primary one: a family whose graphs show an op form, task or attention "
                   "trait no other member does (ep/golden_suite.py checks that the cohort "
                   "shows them all), or whose fused form depends on the dtype (MoE)",
}

#: attention forms that some EP kernels cannot take, declared by the families that have
#: them: the EP suites derive which fused-attention checks cannot hold from these and
#: the EP's capabilities (testing/ep_suite.py TRAIT_GAPS), so a new family with one
#: edits no EP table
ATTENTION_TRAITS = {
    "qk_norm_after_rope": "Q and K are normalized after RoPE (HunYuan)",
    "attention_sinks": "a learned sink logit per head joins the softmax (gpt-oss)",
    "kv_sharing": "some layers attend to an earlier layer's K/V and cache nothing (Gemma 4)",
    "unscaled_attention": "normed Q/K at scale 1: attention logits up to head_dim (Gemma 4)",
}


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """One family, declared in its own file: HF model_type(s) -> config normalization + module.

    ``config_overrides`` returns the ArchitectureConfig fields a family implies
    without spelling them in config.json (Qwen2's QKV bias, for example);
    ``normalize_raw`` first renames family-specific config.json keys to the
    standard ones (GPT-2's n_embd -> hidden_size, ...).
    """

    name: str
    model_types: tuple[str, ...]
    module: Callable[[ArchitectureConfig], nn.Module]
    task: Task = causal_lm.TASK
    config_overrides: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda raw: {}
    architectures: tuple[str, ...] = ()
    #: the preset (a key of the declaring module's TINY_PRESETS) the family's tests build
    tiny_preset: str | None = None
    #: shared suites the family joins (keys of COHORTS)
    cohorts: tuple[str, ...] = ()
    normalize_raw: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    #: prefixes a checkpoint may put before the module's names (BertFor* -> "bert.")
    checkpoint_prefixes: tuple[str, ...] = ("",)
    #: (module-name prefix, its checkpoint spellings in order of preference): for
    #: multi-part models whose parts different transformers versions save under
    #: different prefixes (LLaVA: "vision_tower.vision_model." or "vision_tower.").
    #: Each part's spelling is chosen on its own; see mobius/weights/attach.py.
    checkpoint_aliases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: (config, checkpoint) -> the checkpoint as the module reads it: for a released
    #: layout whose tensors differ from transformers' by more than prefixes (renamed
    #: modules, adapters to merge: Phi-4-multimodal's hub layout, mobius/models/phi4mm_hub.py)
    checkpoint_view: Callable[[ArchitectureConfig, Any], Any] | None = None
    #: config -> the checkpoint tensors the module may leave unread, each with its
    #: reason (any other unread tensor is an error: mobius/weights/attach.py)
    ignored_tensors: Callable[[ArchitectureConfig], tuple[IgnoredTensors, ...]] = (
        lambda config: ())
    #: config.json sections the module never reads (the text_config of an image
    #: classifier saved from a two-tower config): left out of the plausibility check,
    #: since the checkpoint holds no tensors for them
    unread_config: tuple[str, ...] = ()
    #: attention blocks outside the num_hidden_layers layers (SigLIP's attention-pooling
    #: head): what per-layer op counts (the EP suites' L2 tables) add
    extra_attention_blocks: int = 0
    #: the family's switches beyond ArchitectureConfig's fields: a frozen dataclass that
    #: mobius/config/options.read_options fills from config.json into ``config.options``
    #: (a wrong type fails with the config, before any weight is read)
    options: type | None = None
    #: keys of ATTENTION_TRAITS the family's attention has
    attention_traits: tuple[str, ...] = ()
    #: config -> the checkpoint's multi-token-prediction head (mobius/components/mtp_head.py),
    #: which ``--mtp`` builds as genai's speculative drafter (mobius/tasks/mtp.py); None:
    #: the family has no MTP head
    mtp_head: Callable[[ArchitectureConfig], nn.Module] | None = None
    #: config -> where the checkpoint keeps that head (default: ``mtp.*``, MtpHead's own names)
    mtp_tensors: Callable[[ArchitectureConfig], MtpTensors] = lambda config: MtpTensors()

    def __post_init__(self):
        for field, known in (("cohorts", COHORTS), ("attention_traits", ATTENTION_TRAITS)):
            unknown = sorted(set(getattr(self, field)) - set(known))
            if unknown:
                raise ValueError(f"{self.name}: unknown {field} {unknown}; known: {sorted(known)}")

    def make_config(self, raw: Mapping[str, Any],
                    generation: Mapping[str, Any] | None = None) -> ArchitectureConfig:
        if self.normalize_raw is not None:  # keeps what Task.read_extras added ("mobius_*")
            extras = {k: v for k, v in raw.items() if k.startswith("mobius_")}
            raw = {**self.normalize_raw(raw), **extras}
        options = read_options(self.options, raw) if self.options is not None else None
        return ArchitectureConfig.from_dict(raw, generation, **self.config_overrides(raw),
                                            options=options)
