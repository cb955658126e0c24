"""``mobius.build(..., mtp=True)``: the checkpoint's MTP head built beside its decoder."""

from __future__ import annotations

import re

from mobius.config.architecture import ArchitectureConfig
from mobius.context import build_context
from mobius.errors import MobiusError
from mobius.optimize.pipeline import optimize_model
from mobius.package.model_package import ModelPackage
from mobius.roles import DECODER
from mobius.tasks.mtp import FOLDER, KEY, build_mtp, expose_hidden_states, mtp_genai_configs
from mobius.weights.attach import IgnoredTensors, attach_weights


def decoder_tensors(head_prefix: str) -> IgnoredTensors:
    """What the head may leave unread: every tensor outside its own (the decoder's, whose
    embedding and LM head a DeepSeek-style head reads as its own copies instead)."""
    return IgnoredTensors(rf"(?!{re.escape(head_prefix)}).*",
                          "the decoder's tensors (built as model.onnx) and any further MTP "
                          "modules (genai drafts with one)")


def check_mtp(family, config: ArchitectureConfig, checkpoint) -> None:
    """Before any graph is built: the family has an MTP head and the checkpoint holds it
    where the family says it lives."""
    if family.mtp_head is None:
        raise MobiusError(f"--mtp: the {family.name} family has no multi-token-prediction "
                          f"head (families with one declare mtp_head)")
    prefix = family.mtp_tensors(config).prefix
    if not any(name.startswith(prefix) for name in checkpoint.names()):
        raise MobiusError(f"--mtp: the checkpoint holds no {prefix}* tensors (no MTP head)")


def add_mtp_head(package: ModelPackage, family, config: ArchitectureConfig, checkpoint,
                 target, quant, trace: bool) -> None:
    """Builds the family's MTP head as the package's mtp/model.onnx (optimized like the
    decoder), exposes the decoder's hidden states and writes genai's configs for it."""
    with build_context(target.caps, target.dtype):
        head, where = family.mtp_head(config), family.mtp_tensors(config)
        attach_weights(head, checkpoint, family.checkpoint_prefixes,
                       family.checkpoint_aliases + where.aliases, (decoder_tensors(where.prefix),))
        model = build_mtp(head, config)
        optimize_model(model, target.caps, target.dtype, DECODER, trace=trace, quant=quant)
    expose_hidden_states(package.model, config)
    package.models[KEY] = model
    package.extra_json[f"{FOLDER}/genai_config.json"] = mtp_genai_configs(package.genai_config,
                                                                          config)
