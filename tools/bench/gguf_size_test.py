"""gguf_size: llama-quantize's Q4_0-file types per tensor, and bytes that agree with the
gguf package's own quantizer and block sizes (what a written file holds)."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from tools.bench import gguf_size, shapes

#: a small untied Llama: rows of 256 (the head goes to Q6_K), every matrix whole Q4_0 blocks
CONFIG = {**shapes.PRESETS["200m"][0], "hidden_size": 256, "intermediate_size": 512,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64, "vocab_size": 96}


@pytest.mark.parametrize("name, shape, tied, kind", [
    ("model.embed_tokens.weight", (96, 256), False, "Q4_0"),
    ("model.embed_tokens.weight", (96, 256), True, "Q6_K"),  # a tied table is the output
    ("lm_head.weight", (96, 256), False, "Q6_K"),
    ("lm_head.weight", (96, 96), False, "Q8_0"),  # rows not whole Q6_K blocks
    ("model.layers.0.mlp.down_proj.weight", (256, 512), False, "Q4_0"),
    ("model.norm.weight", (256,), False, "F32"),
])
def test_types_follow_llama_quantize(name, shape, tied, kind):
    assert gguf_size.tensor_type(name, shape, tied) == kind


def test_bytes_equal_what_gguf_writes():
    tensors = shapes.checkpoint_tensors(CONFIG)
    expected = 0
    for name, shape in tensors:
        kind = gguf_size.tensor_type(name, shape, False)
        if kind == "Q4_0":
            expected += gguf.quants.quantize(np.ones(shape, np.float32), T.Q4_0).nbytes
        elif kind == "F32":
            expected += 4 * int(np.prod(shape))
        else:
            per_block, nbytes = gguf.GGML_QUANT_SIZES[T[kind]]
            expected += int(np.prod(shape)) // per_block * nbytes
    assert gguf_size.q4_0_bytes(tensors, tied=False) == expected
    assert gguf_size.q4_0_bytes(tensors, tied=True) != expected  # the table at Q6_K


def test_rows_outside_whole_blocks_are_refused():
    with pytest.raises(ValueError, match="not whole Q4_0 blocks"):
        gguf_size.tensor_type("model.layers.0.mlp.up_proj.weight", (64, 48), False)
