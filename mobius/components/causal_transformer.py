"""The body and head shared by decoder-only LMs.

``CausalTransformer``: embed -> layers -> final norm. It computes, once per
graph, cos/sin for each RoPE kind (e.g. Gemma 3's local and global bases) and
one attention mask per sliding-window size; layer i receives the cos/sin of its
RoPE kind (None for NoPE layers) and the mask of its window.

``CausalLM``: the LM head on top, with optional final-logit softcapping and
logit scaling.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.attention_mask import causal_padding_mask, token_blocks
from mobius.components.block_sparse import BlockSparsePattern
from mobius.components.embedding import Embedding
from mobius.components.lm_head import LMHead
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import RopeConfig
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


def scalar(op, value: float):
    """A scalar constant in the build dtype."""
    return op.Constant(value=ir.tensor(np.array(value, dtype=numpy_dtype(get_build_dtype()))))


class CausalTransformer(nn.Module):
    def __init__(
        self,
        config: ArchitectureConfig,
        layers: Sequence[nn.Module],
        norm: nn.Module,
        *,
        ropes: dict[str, RopeConfig] | None = None,
        layer_rope_kinds: Sequence[str | None] | None = None,
        embed_scale: float | None = None,
        norm_attribute: str = "norm",
        embedding_attribute: str = "embed_tokens",
        layers_attribute: str = "layers",
        position_embedding: nn.Module | None = None,
        layer_patterns: Sequence[BlockSparsePattern | None] | None = None,
    ):
        """ropes: RoPE kind -> config (default: {"default": config.rope});
        layer_rope_kinds: each layer's RoPE kind, None for a layer without RoPE;
        *_attribute: checkpoint names of the parts (Phi: final_layernorm; GPT-2:
        wte, h, ln_f); position_embedding: learned absolute positions (GPT-2's wpe);
        layer_patterns: each layer's block-sparse pattern, None for dense (Phi-3-small)."""
        super().__init__()
        self.config = config
        self.attributes = (embedding_attribute, layers_attribute, norm_attribute)
        setattr(self, embedding_attribute, Embedding(config.vocab_size, config.hidden_size))
        setattr(self, layers_attribute, nn.ModuleList(list(layers)))
        self.wpe = position_embedding
        setattr(self, norm_attribute, norm)
        ropes = ropes if ropes is not None else {"default": config.rope}
        self.rope_kinds = list(ropes)
        for kind, rope in ropes.items():
            setattr(self, f"rotary_emb_{kind}", RotaryEmbedding(rope))
        self.layer_rope_kinds = (list(layer_rope_kinds) if layer_rope_kinds is not None
                                 else [self.rope_kinds[0]] * len(layers))
        self.embed_scale = embed_scale
        self.layer_patterns = (list(layer_patterns) if layer_patterns is not None
                               else [None] * len(layers))
        #: a token whose runs attend bidirectionally when input_ids is given (Gemma 3's images)
        self.block_token_id: int | None = None

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values,
                inputs_embeds=None, layer_additions=()):
        """``inputs_embeds`` [batch, seq, hidden], when given, replaces the token
        lookup (``input_ids`` is then None): a multi-modal model's embedding
        graph has already merged image features into it. Everything after the
        lookup (learned positions, embedding scale) still applies, as in transformers.
        ``layer_additions[i]`` [batch, seq, hidden] is added to layer i's output
        (Qwen3-VL's deepstack visual features)."""
        config = self.config
        embedding, layers, norm = (getattr(self, name) for name in self.attributes)
        hidden = embedding(op, input_ids) if inputs_embeds is None else inputs_embeds
        # input_ids beside inputs_embeds only says which tokens form blocks (block_token_id)
        tokens = input_ids if inputs_embeds is None else inputs_embeds  # [batch, seq, ...]
        if self.wpe is not None:
            hidden = op.Add(hidden, self.wpe(op, position_ids))
        if self.embed_scale is not None:
            hidden = op.Mul(hidden, scalar(op, self.embed_scale))
        rotary = {kind: getattr(self, f"rotary_emb_{kind}")(op, position_ids)
                  for kind in self.rope_kinds if kind in self.layer_rope_kinds}
        masks = {}
        blocks = (token_blocks(op, input_ids, self.block_token_id)
                  if self.block_token_id is not None and input_ids is not None else None)
        presents = []
        for i, layer in enumerate(layers):
            window = config.layer_sliding_window(i)
            key = (window, self.layer_patterns[i])
            if key not in masks:
                masks[key] = causal_padding_mask(
                    op, tokens, attention_mask, get_build_dtype(), window, blocks, key[1]
                )
            kind = self.layer_rope_kinds[i]
            cos, sin = rotary[kind] if kind is not None else (None, None)
            hidden, present_key, present_value = layer(
                op, hidden, cos, sin, masks[key], *past_key_values[i]
            )
            if i < len(layer_additions):
                hidden = op.Add(hidden, layer_additions[i])
            presents.append((present_key, present_value))
        return norm(op, hidden), presents


class CausalLM(nn.Module):
    """``model`` (a CausalTransformer) + ``lm_head`` (+ softcap / logit scaling)."""

    def __init__(self, config: ArchitectureConfig, model: nn.Module, *,
                 lm_head_bias: bool = False, final_logit_softcap: float | None = None,
                 logits_divisor: float | None = None, body_attribute: str = "model"):
        """body_attribute: the body's checkpoint prefix (GPT-2: transformer). A tied
        lm_head reads the body's input embedding (one initializer for both)."""
        super().__init__()
        self.body_attribute = body_attribute
        setattr(self, body_attribute, model)
        tied = getattr(model, model.attributes[0]) if config.tie_word_embeddings else None
        self.lm_head = LMHead(config.hidden_size, config.vocab_size, lm_head_bias, tied=tied)
        self.final_logit_softcap = final_logit_softcap
        self.logits_divisor = logits_divisor

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values,
                inputs_embeds=None, **body_inputs):
        """``body_inputs``: further inputs of the body (``layer_additions``)."""
        body = getattr(self, self.body_attribute)
        extra = {} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
        extra.update(body_inputs)
        hidden, presents = body(op, input_ids, attention_mask, position_ids, past_key_values,
                                **extra)
        logits = self.lm_head(op, hidden)
        if self.logits_divisor is not None and self.logits_divisor != 1.0:
            logits = op.Div(logits, scalar(op, self.logits_divisor))
        if self.final_logit_softcap:
            cap = scalar(op, self.final_logit_softcap)
            logits = op.Mul(op.Tanh(op.Div(logits, cap)), cap)
        return logits, presents
