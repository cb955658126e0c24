"""Activation functions by their transformers names, as standard ONNX ops."""

from mobius.errors import ConfigError

SUPPORTED_ACTIVATIONS = ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "quick_gelu", "relu",
                         "relu2")


def apply_activation(op, x, name: str):
    if name in ("silu", "swish"):
        return op.Mul(x, op.Sigmoid(x))
    if name == "gelu":
        return op.Gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return op.Gelu(x, approximate="tanh")
    if name == "quick_gelu":  # CLIP: x * sigmoid(1.702 x)
        return op.Mul(x, op.Sigmoid(op.Mul(x, op.CastLike(op.Constant(value_float=1.702), x))))
    if name == "relu":
        return op.Relu(x)
    if name == "relu2":  # Nemotron: squared ReLU
        relu = op.Relu(x)
        return op.Mul(relu, relu)
    raise ConfigError(
        f"config.json: hidden_act {name!r} is not supported; supported: {', '.join(SUPPORTED_ACTIVATIONS)}"
    )
