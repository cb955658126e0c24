"""xIELU (arXiv 2411.13010, Apertus): a trainable activation, quadratic for x > 0 and
ELU-like below, from two learned scalars and two stored constants:

    a_p = softplus(alpha_p),  a_n = beta + softplus(alpha_n)
    y = a_p x^2 + beta x                          (x > 0)
    y = a_n (expm1(min(x, eps)) - x) + beta x     (x <= 0)

Parameter names follow transformers' XIELUActivation (``act_fn.alpha_p`` ...): the
checkpoint stores beta and eps too, so they are read, not assumed. expm1 is Exp - 1
(ONNX has no Expm1): near 0 it loses digits only relative to a term that vanishes.
"""

from onnxscript import nn

from mobius.components.weight import Weight


class XIELU(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha_p = Weight([1])
        self.alpha_n = Weight([1])
        self.beta = Weight([])
        self.eps = Weight([])

    def forward(self, op, x):
        one = op.CastLike(op.Constant(value_float=1.0), x)
        beta_x = op.Mul(self.beta, x)
        positive = op.Add(op.Mul(op.Softplus(self.alpha_p), op.Mul(x, x)), beta_x)
        alpha_n = op.Add(self.beta, op.Softplus(self.alpha_n))
        expm1 = op.Sub(op.Exp(op.Min(x, self.eps)), one)
        negative = op.Add(op.Mul(alpha_n, op.Sub(expm1, x)), beta_x)
        return op.Where(op.Greater(x, op.CastLike(op.Constant(value_float=0.0), x)),
                        positive, negative)
