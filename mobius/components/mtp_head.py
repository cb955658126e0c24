"""A multi-token-prediction (MTP) head: the drafter onnxruntime-genai's MtpGenerator runs.

Given the token t+1 and the decoder's final (normed) hidden state at t, it predicts
token t+2: ``fc(concat(norm_e(embed(t+1)), norm_h(hidden)))`` runs through one
full-attention decoder layer with its own one-layer KV cache, then the head's own
final norm and the decoder's LM head. The embedding and LM head are the decoder's
(``model.embed_tokens`` / ``lm_head``: the same checkpoint tensors); everything else
is ``mtp.*``, as Qwen 3.5 / Qwen3-Next checkpoints name it. The normed output is
also returned (``hidden_states_out``): genai feeds it back to draft a further token.

DeepSeek-V3 (and GLM-4.5) describe the same module under other names: the MTP module
is decoder layer ``num_hidden_layers`` of the checkpoint, holding ``enorm`` (of the
embedding), ``hnorm`` (of the hidden state), ``eh_proj`` over their concatenation
(embedding first), the decoder layer's own tensors, ``shared_head.norm`` and
``shared_head.head`` (the output head, a copy of ``lm_head``) and, in DeepSeek-V3's
release, ``embed_tokens`` (a copy of the decoder's): ``MtpTensors`` says where a
checkpoint keeps the head, ``nextn_tensors`` is that layout.
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.attention_mask import causal_padding_mask
from mobius.components.embedding import Embedding
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.components.rms_norm import RMSNorm
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype


@dataclasses.dataclass(frozen=True)
class MtpTensors:
    """Where a checkpoint keeps the head: ``prefix`` starts each of the head's own tensors
    (what ``--mtp`` looks for); ``aliases`` respell MtpHead's module names as the
    checkpoint's (mobius/weights/attach.py: the first spelling the checkpoint has wins)."""

    prefix: str = "mtp."
    aliases: tuple[tuple[str, tuple[str, ...]], ...] = ()


def nextn_tensors(config: ArchitectureConfig) -> MtpTensors:
    """DeepSeek-V3's layout: the first MTP module is decoder layer ``num_hidden_layers``
    (further modules, if any, are not read: genai drafts with one head); its embedding
    is its own copy where the checkpoint ships one, else the decoder's."""
    layer = f"model.layers.{config.num_hidden_layers}."
    return MtpTensors(layer, (
        ("mtp.pre_fc_norm_embedding.", (layer + "enorm.",)),
        ("mtp.pre_fc_norm_hidden.", (layer + "hnorm.",)),
        ("mtp.fc.", (layer + "eh_proj.",)),
        ("mtp.layers.0.", (layer,)),
        ("mtp.norm.", (layer + "shared_head.norm.",)),
        ("lm_head.", (layer + "shared_head.head.",)),
        ("model.embed_tokens.", (layer + "embed_tokens.", "model.embed_tokens.")),
    ))


class _TokenEmbedding(nn.Module):
    """The decoder's token embedding, under its checkpoint name (model.embed_tokens)."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)


class MtpBlock(nn.Module):
    """The ``mtp.*`` tensors: the two input norms, the fusing projection, one decoder
    layer and the final norm (norms are the family's, e.g. Qwen's (1 + w) RMSNorm)."""

    def __init__(self, config: ArchitectureConfig, layer: nn.Module, norm):
        super().__init__()
        hidden = config.hidden_size
        self.pre_fc_norm_embedding = norm(hidden)
        self.pre_fc_norm_hidden = norm(hidden)
        self.fc = Linear(2 * hidden, hidden)
        self.layers = nn.ModuleList([layer])
        self.norm = norm(hidden)


class MtpHead(nn.Module):
    """input_ids, the decoder's hidden_states, attention_mask, position_ids and the
    layer's past key/value -> logits, hidden_states_out, present key/value."""

    def __init__(self, config: ArchitectureConfig, layer: nn.Module, norm):
        """layer: a full-attention decoder layer called as ``layer(op, hidden, cos, sin,
        mask, past_key, past_value)``; norm: size -> the family's RMSNorm."""
        super().__init__()
        self.model = _TokenEmbedding(config)
        self.mtp = MtpBlock(config, layer, norm)
        tied = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = LMHead(config.hidden_size, config.vocab_size, tied=tied)
        self.rotary_emb = RotaryEmbedding(config.rope)

    def forward(self, op, input_ids, hidden_states, attention_mask, position_ids,
                past_key, past_value):
        mtp = self.mtp
        embedded = mtp.pre_fc_norm_embedding(op, self.model.embed_tokens(op, input_ids))
        fused = mtp.fc(op, op.Concat(embedded, mtp.pre_fc_norm_hidden(op, hidden_states),
                                     axis=-1))
        cos, sin = self.rotary_emb(op, position_ids)
        mask = causal_padding_mask(op, input_ids, attention_mask, get_build_dtype())
        hidden, key, value = mtp.layers[0](op, fused, cos, sin, mask, past_key, past_value)
        hidden = mtp.norm(op, hidden)
        return self.lm_head(op, hidden), hidden, key, value


def nextn_head(config: ArchitectureConfig, layer: nn.Module) -> MtpHead:
    """A DeepSeek-V3-style head (nextn_tensors) around ``layer``, the family's decoder layer
    ``num_hidden_layers``: plain RMSNorms and its own output head (shared_head.head)."""
    untied = dataclasses.replace(config, tie_word_embeddings=False)
    return MtpHead(untied, layer, lambda size: RMSNorm(size, config.rms_norm_eps))
