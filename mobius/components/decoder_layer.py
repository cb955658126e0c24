"""Decoder layer arrangements: where the norms sit around attention and MLP.

- ``PreNormDecoderLayer`` (Llama): x + attn(norm(x)), then x + mlp(norm(x));
  ``residual_scale`` scales each branch before the residual add (Granite).
- ``SandwichNormDecoderLayer`` (Gemma 2/3): norms before and after each branch.
- ``PostNormDecoderLayer`` (OLMo 2): x + norm(attn(x)), then x + norm(mlp(x)).
- ``ParallelDecoderLayer`` (Phi-1.5/2): x + attn(norm(x)) + mlp(norm(x)).

Attribute names follow the transformers modules of the families using them,
so checkpoint tensors bind by name.
"""

from onnxscript import nn

from mobius.components.causal_transformer import scalar


#: Llama's names of the two pre-norms: before attention, before the MLP.
LLAMA_PRE_NORM_NAMES = ("input_layernorm", "post_attention_layernorm")


class PreNormDecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, mlp: nn.Module, input_layernorm: nn.Module,
                 post_attention_layernorm: nn.Module, residual_scale: float | None = None,
                 names: tuple[str, str] = LLAMA_PRE_NORM_NAMES):
        """names: the two norms' attribute names (Apertus: attention_layernorm,
        feedforward_layernorm)."""
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.names = names
        setattr(self, names[0], input_layernorm)
        setattr(self, names[1], post_attention_layernorm)
        self.residual_scale = residual_scale

    def _scaled(self, op, x):
        if self.residual_scale is None or self.residual_scale == 1.0:
            return x
        return op.Mul(x, scalar(op, self.residual_scale))

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        pre_attn, pre_mlp = (getattr(self, name) for name in self.names)
        attn, present_key, present_value = self.self_attn(
            op, pre_attn(op, hidden), cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, self._scaled(op, attn))
        mlp = self.mlp(op, pre_mlp(op, hidden))
        hidden = op.Add(hidden, self._scaled(op, mlp))
        return hidden, present_key, present_value


#: Gemma 2/3's names of the four sandwich norms, in order: before attention,
#: after attention, before the MLP, after the MLP.
GEMMA_SANDWICH_NAMES = ("input_layernorm", "post_attention_layernorm",
                        "pre_feedforward_layernorm", "post_feedforward_layernorm")


class SandwichNormDecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, mlp: nn.Module, input_layernorm: nn.Module,
                 post_attention_layernorm: nn.Module, pre_feedforward_layernorm: nn.Module,
                 post_feedforward_layernorm: nn.Module,
                 names: tuple[str, str, str, str] = GEMMA_SANDWICH_NAMES):
        """names: the four norms' attribute names (GLM-4: input_layernorm,
        post_self_attn_layernorm, post_attention_layernorm, post_mlp_layernorm)."""
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.names = names
        norms = (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
                 post_feedforward_layernorm)
        for name, norm in zip(names, norms):
            setattr(self, name, norm)

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        pre_attn, post_attn, pre_mlp, post_mlp = (getattr(self, n) for n in self.names)
        attn, present_key, present_value = self.self_attn(
            op, pre_attn(op, hidden), cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, post_attn(op, attn))
        mlp = self.mlp(op, pre_mlp(op, hidden))
        hidden = op.Add(hidden, post_mlp(op, mlp))
        return hidden, present_key, present_value


class PostNormDecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, mlp: nn.Module, post_attention_layernorm: nn.Module,
                 post_feedforward_layernorm: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.post_attention_layernorm = post_attention_layernorm
        self.post_feedforward_layernorm = post_feedforward_layernorm

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, present_key, present_value = self.self_attn(
            op, hidden, cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, self.post_attention_layernorm(op, attn))
        hidden = op.Add(hidden, self.post_feedforward_layernorm(op, self.mlp(op, hidden)))
        return hidden, present_key, present_value


class ParallelDecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, mlp: nn.Module, input_layernorm: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_layernorm

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        normed = self.input_layernorm(op, hidden)
        attn, present_key, present_value = self.self_attn(
            op, normed, cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(op.Add(hidden, attn), self.mlp(op, normed))
        return hidden, present_key, present_value
