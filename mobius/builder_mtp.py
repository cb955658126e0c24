"""``mobius.build(..., mtp=True)``: the checkpoint's MTP head built beside its decoder."""

from __future__ import annotations

import onnx_ir as ir

from mobius.config.architecture import ArchitectureConfig
from mobius.context import build_context
from mobius.errors import MobiusError
from mobius.optimize.pipeline import optimize_model
from mobius.package.model_package import ModelPackage
from mobius.roles import DECODER
from mobius.tasks.mtp import FOLDER, KEY, build_mtp, expose_hidden_states, mtp_genai_configs
from mobius.weights.attach import IgnoredTensors, attach_weights

#: what the head leaves unread: every tensor but its own, the embedding and the LM head
#: (under a multimodal checkpoint's model.language_model. too)
DECODER_TENSORS = IgnoredTensors(
    r"(?!mtp\.|lm_head\.|model\.(language_model\.)?embed_tokens\.).*",
    "the decoder's tensors (built as model.onnx)")


def check_mtp(family, checkpoint) -> None:
    """Before any graph is built: the family has an MTP head and the checkpoint holds it."""
    if family.mtp_head is None:
        raise MobiusError(f"--mtp: the {family.name} family has no multi-token-prediction "
                          f"head (families with one declare mtp_head)")
    if not any(name.startswith("mtp.") for name in checkpoint.names()):
        raise MobiusError("--mtp: the checkpoint holds no mtp.* tensors (no MTP head)")


def add_mtp_head(package: ModelPackage, family, config: ArchitectureConfig, checkpoint,
                 target, quant, trace: bool) -> None:
    """Builds the family's MTP head as the package's mtp/model.onnx (optimized like the
    decoder), exposes the decoder's hidden states and writes genai's configs for it."""
    with build_context(target.caps, target.dtype):
        head = family.mtp_head(config)
        attach_weights(head, checkpoint, family.checkpoint_prefixes, family.checkpoint_aliases,
                       (DECODER_TENSORS,))
        model = build_mtp(head, config)
        optimize_model(model, target.caps, target.dtype, DECODER, trace=trace, quant=quant)
    expose_hidden_states(package.model, config)
    package.models[KEY] = model
    package.extra_json[f"{FOLDER}/genai_config.json"] = mtp_genai_configs(package.genai_config,
                                                                          config)
