"""gguf_config on GGUF files written with gguf's own writer: what config.json it gives,
and the metadata it refuses by name before any tensor is read."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from mobius.config.gguf_config import gguf_config
from mobius.errors import ConfigError


def _write(path: str, arch: str = "llama", heads: int = 4, skip: str = "",
           tensors: tuple[str, ...] = ("token_embd.weight",)):
    writer = gguf.GGUFWriter(path, arch)
    for key, value in (("context_length", 128), ("embedding_length", 64),
                       ("feed_forward_length", 96), ("block_count", 2)):
        if key != skip:
            getattr(writer, f"add_{key}")(value)
    writer.add_head_count(heads)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_bos_token_id(1)
    for name in tensors:
        writer.add_tensor(name, np.zeros((37, 64), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.GGUFReader(path)


def test_config_json_from_metadata_and_tensors(tmp_path):
    arch, raw, generation = gguf_config(_write(str(tmp_path / "m.gguf"), tensors=(
        "token_embd.weight", "output.weight", "blk.0.attn_q.bias")))
    assert arch == "llama"
    assert {k: raw[k] for k in ("model_type", "hidden_size", "intermediate_size", "vocab_size",
                                "num_hidden_layers", "num_attention_heads",
                                "num_key_value_heads", "max_position_embeddings",
                                "tie_word_embeddings", "attention_bias", "mlp_bias")} == {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "vocab_size": 37,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128, "tie_word_embeddings": False, "attention_bias": True,
        "mlp_bias": False}
    assert generation == {"bos_token_id": 1}


@pytest.mark.parametrize("kwargs, message", [
    (dict(arch="falcon"), "GGUF architecture 'falcon' is not supported; mobius reads llama"),
    (dict(skip="block_count"), "GGUF file has no llama.block_count"),
    (dict(heads=0), "GGUF llama.attention.head_count must be a positive integer, got 0"),
    (dict(tensors=()), "GGUF file has no token_embd.weight tensor"),
])
def test_bad_metadata_is_refused_by_name(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        gguf_config(_write(str(tmp_path / "m.gguf"), **kwargs))
