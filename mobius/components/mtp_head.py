"""A multi-token-prediction (MTP) head: the drafter onnxruntime-genai's MtpGenerator runs.

Given the token t+1 and the decoder's final (normed) hidden state at t, it predicts
token t+2: ``fc(concat(norm_e(embed(t+1)), norm_h(hidden)))`` runs through one
full-attention decoder layer with its own one-layer KV cache, then the head's own
final norm and the decoder's LM head. The embedding and LM head are the decoder's
(``model.embed_tokens`` / ``lm_head``: the same checkpoint tensors); everything else
is ``mtp.*``, as Qwen 3.5 / Qwen3-Next checkpoints name it. The normed output is
also returned (``hidden_states_out``): genai feeds it back to draft a further token.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.attention_mask import causal_padding_mask
from mobius.components.embedding import Embedding
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype


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
