"""Per-layer embeddings (Gemma 3n, Gemma 4): beside the token embedding, each layer gets
its own small input [batch, seq, P] from the token and the embedded sequence, which the
layer adds back through a gated branch.

* The body (``PerLayerEmbeddings``): a second token table [vocab_size_per_layer_input,
  layers * P] (x sqrt(P)) plus a projection of the scaled token embedding
  (x hidden^-0.5, RMSNorm over P), summed and x 2^-0.5 -> [batch, seq, layers, P].
* The layer (``PerLayerInputBranch``): norm(per_layer_projection(act(per_layer_input_gate(h))
  * input)).

Both are mixins of nn.Modules, so the checkpoint names stay those of the body and the
layer themselves (``model.embed_tokens_per_layer``, ``layers.N.per_layer_input_gate``).
"""

from __future__ import annotations

from mobius.components.activations import apply_activation
from mobius.components.causal_transformer import scalar
from mobius.components.embedding import Embedding
from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm


class PerLayerEmbeddings:
    """Mixin of a decoder body: ``embed_tokens_per_layer``, ``per_layer_model_projection``,
    ``per_layer_projection_norm``."""

    def add_per_layer_embeddings(self, layers: int, size: int, vocab: int, hidden: int,
                                 eps: float, *, clamp_ids: int | None = None):
        """clamp_ids: token ids at or above it read row 0 (Gemma 3n's multimodal ids,
        beyond a table smaller than the vocabulary)."""
        self.per_layer_dims = (layers, size, hidden)
        self.per_layer_clamp = clamp_ids
        self.embed_tokens_per_layer = Embedding(vocab, layers * size)
        self.per_layer_model_projection = Linear(hidden, layers * size)
        self.per_layer_projection_norm = RMSNorm(size, eps)

    def per_layer_inputs(self, op, input_ids, embeds):
        """[batch, seq, layers, P]: (norm(proj(embeds) / sqrt(hidden)) + table * sqrt(P))
        / sqrt(2)."""
        layers, size, hidden = self.per_layer_dims
        if self.per_layer_clamp is not None:
            inside = op.Less(input_ids, op.Constant(value_int=self.per_layer_clamp))
            input_ids = op.Where(inside, input_ids, op.Constant(value_int=0))
        shape = op.Constant(value_ints=[0, 0, layers, size])
        table = op.Mul(self.embed_tokens_per_layer(op, input_ids), scalar(op, size**0.5))
        projected = op.Mul(self.per_layer_model_projection(op, embeds), scalar(op, hidden**-0.5))
        projected = self.per_layer_projection_norm(op, op.Reshape(projected, shape))
        return op.Mul(op.Add(projected, op.Reshape(table, shape)), scalar(op, 0.5**0.5))


class PerLayerInputBranch:
    """Mixin of a decoder layer: ``per_layer_input_gate``, ``per_layer_projection``,
    ``post_per_layer_input_norm``."""

    def add_per_layer_input_branch(self, hidden: int, size: int, eps: float, activation: str):
        self.per_layer_activation = activation
        self.per_layer_input_gate = Linear(hidden, size)
        self.per_layer_projection = Linear(size, hidden)
        self.post_per_layer_input_norm = RMSNorm(hidden, eps)

    def per_layer_branch(self, op, hidden, per_layer_input):
        """norm(per_layer_projection(act(per_layer_input_gate(hidden)) * per_layer_input))."""
        gate = apply_activation(op, self.per_layer_input_gate(op, hidden),
                                self.per_layer_activation)
        branch = self.per_layer_projection(op, op.Mul(gate, per_layer_input))
        return self.post_per_layer_input_norm(op, branch)
