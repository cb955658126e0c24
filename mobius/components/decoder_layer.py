"""Pre-norm transformer decoder layer: x + attn(norm(x)), then x + mlp(norm(x))."""

from onnxscript import nn


class PreNormDecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, mlp: nn.Module, input_layernorm: nn.Module,
                 post_attention_layernorm: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_layernorm
        self.post_attention_layernorm = post_attention_layernorm

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, present_key, present_value = self.self_attn(
            op, self.input_layernorm(op, hidden), cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, attn)
        hidden = op.Add(hidden, self.mlp(op, self.post_attention_layernorm(op, hidden)))
        return hidden, present_key, present_value
