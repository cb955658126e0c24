"""Token embedding lookup."""

from onnxscript import nn

from mobius.components.weight import Weight


class Embedding(nn.Module):
    """``checkpoint_name``: read another module's table (a graph of a multi-model
    package needs its own copy of a table the other graph also reads)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, checkpoint_name: str | None = None):
        super().__init__()
        self.weight = Weight([num_embeddings, embedding_dim], checkpoint_name=checkpoint_name)

    def forward(self, op, input_ids):
        return op.Gather(self.weight, input_ids, axis=0)
