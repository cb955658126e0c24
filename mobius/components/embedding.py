"""Token embedding lookup."""

from onnxscript import nn

from mobius.components.weight import Weight


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = Weight([num_embeddings, embedding_dim])

    def forward(self, op, input_ids):
        return op.Gather(self.weight, input_ids, axis=0)
