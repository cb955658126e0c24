"""AltUp, alternating updates (Gemma 3n): the residual stream widened to N streams, of
which each layer computes on one (the active stream) and a learned map updates the rest.

Streams are kept stacked on the last axis, [batch, seq, hidden, N]:

* ``expand_streams``: stream 0 is the embedding; stream i > 0 is ``altup_projections``
  [i-1] of it, rescaled to the embedding's RMS magnitude (each token on its own).
* ``AltUp.predict``: c = prediction_coefs(tanh(modality_router(norm(active) / hidden)))
  [.., N*N]; stream j becomes s_j + sum_i s_i * c[j*N + i].
* ``AltUp.correct`` (after the layer ran on the active prediction, giving y):
  k = correction_coefs(router(y)) + 1 [.., N]; stream i becomes p_i + (y - p_active) * k_i.
* ``collapse_streams``: stream i > 0 through ``altup_unembed_projections`` [i-1], rescaled
  to stream 0's magnitude; the mean of all N.

A magnitude is sqrt(mean(x^2)) over hidden, a rescaled stream's floored at sqrt(1e-5).
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.causal_transformer import scalar
from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight

#: the floor of a rescaled stream's mean square
_MIN_MEAN_SQUARE = 1e-5


def _mean_square(op, x):
    return op.ReduceMean(op.Mul(x, x), op.Constant(value_ints=[-1]), keepdims=1)


def _rescaled(op, x, magnitude):
    """x * magnitude / sqrt(max(mean(x^2), 1e-5))."""
    floor = op.Max(_mean_square(op, x), scalar(op, _MIN_MEAN_SQUARE))
    return op.Div(op.Mul(x, magnitude), op.Sqrt(floor))


def _stacked(op, streams):
    return op.Concat(*(op.Unsqueeze(s, op.Constant(value_ints=[-1])) for s in streams), axis=-1)


def stream(op, streams, index: int):
    """Stream ``index`` of [batch, seq, hidden, N] -> [batch, seq, hidden]."""
    return op.Gather(streams, op.Constant(value_int=index), axis=-1)


def expand_streams(op, hidden, projections) -> object:
    """[batch, seq, hidden] -> [batch, seq, hidden, N]: the input and its projections
    (N - 1 Linears), each at the input's magnitude."""
    magnitude = op.Sqrt(_mean_square(op, hidden))
    return _stacked(op, [hidden, *(_rescaled(op, p(op, hidden), magnitude)
                                   for p in projections)])


def collapse_streams(op, streams, projections):
    """[batch, seq, hidden, N] -> [batch, seq, hidden]: the mean of stream 0 and the
    projected others (N - 1 Linears), each at stream 0's magnitude."""
    first = stream(op, streams, 0)
    magnitude = op.Sqrt(_mean_square(op, first))
    rest = [_rescaled(op, p(op, stream(op, streams, i + 1)), magnitude)
            for i, p in enumerate(projections)]
    return op.ReduceMean(_stacked(op, [first, *rest]), op.Constant(value_ints=[-1]),
                         keepdims=0)


class AltUp(nn.Module):
    """One layer's predict / correct, transformers' Gemma3nTextAltUp names; with
    ``correct_scale`` the corrected active stream is scaled by ``correct_output_scale``."""

    def __init__(self, hidden_size: int, num_inputs: int, active: int, eps: float,
                 correct_scale: bool = True):
        super().__init__()
        self.hidden_size, self.num_inputs, self.active = hidden_size, num_inputs, active
        self.correct_output_scale = Weight([hidden_size]) if correct_scale else None
        self.correction_coefs = Linear(num_inputs, num_inputs)
        self.prediction_coefs = Linear(num_inputs, num_inputs * num_inputs)
        self.modality_router = Linear(hidden_size, num_inputs)
        self.router_norm = RMSNorm(hidden_size, eps)

    def _modalities(self, op, x):
        routed = op.Mul(self.router_norm(op, x), scalar(op, 1.0 / self.hidden_size))
        return op.Tanh(self.modality_router(op, routed))

    def predict(self, op, streams):
        """Each stream plus the router-weighted mix of all: [batch, seq, hidden, N]."""
        count = self.num_inputs
        coefs = self.prediction_coefs(op, self._modalities(op, stream(op, streams,
                                                                       self.active)))
        # c[.., j*N + i] -> [.., i, j]: streams [.., hidden, N] @ it mixes i into j
        coefs = op.Transpose(op.Reshape(coefs, op.Constant(value_ints=[0, 0, count, count])),
                             perm=[0, 1, 3, 2])
        return op.Add(op.MatMul(streams, coefs), streams)

    def correct(self, op, predictions, activated):
        """Every prediction moved by its coefficient times the active one's error."""
        coefs = op.Add(self.correction_coefs(op, self._modalities(op, activated)),
                       scalar(op, 1.0))
        innovation = op.Sub(activated, stream(op, predictions, self.active))
        return op.Add(predictions, op.Mul(op.Unsqueeze(innovation, op.Constant(value_ints=[-1])),
                                          op.Unsqueeze(coefs, op.Constant(value_ints=[2]))))

    def forward(self, op, x):
        """The corrected active stream, scaled (the module's own weight is named only
        inside its call, hence the scale is the forward)."""
        return x if self.correct_output_scale is None else op.Mul(x, self.correct_output_scale)
