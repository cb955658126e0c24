"""Phi-3-small's module tree under the hub's names, with no forward: what ORT GenAI's
builder loads (``trust_remote_code``) to read a tiny Phi-3-small checkpoint's weights.

The hub's own modeling code is not available offline (and no test runs it); the builder
only walks the modules (it finds layers by the class name ``*DecoderLayer``) and reads
their weights and config, so this file is copied into the checkpoint as both
``configuration_phi3_small.py`` and ``modeling_phi3_small.py`` (the config.json auto_map).
"""

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

#: Phi3SmallConfig's defaults for the keys the builder reads
DEFAULTS = {"max_position_embeddings": 8192, "rope_embedding_base": 10**6,
            "rope_position_scale": 1.0, "rope_scaling": None,
            "num_key_value_heads": 8, "gegelu_limit": 20.0, "ff_intermediate_size": 14336,
            "layer_norm_epsilon": 1e-5, "mup_use_scaling": True, "mup_width_multiplier": 8.0,
            "mup_embedding_multiplier": 10.0, "mup_attn_multiplier": 1.0,
            "dense_attention_every_n_layers": 2, "blocksparse_block_size": 64,
            "blocksparse_num_local_blocks": 16, "blocksparse_vert_stride": 8,
            "blocksparse_homo_head_pattern": False, "blocksparse_triton_kernel_block_size": 64}


class Phi3SmallConfig(PretrainedConfig):
    model_type = "phi3small"

    def __init__(self, **kwargs):
        for key, default in DEFAULTS.items():
            setattr(self, key, kwargs.pop(key, default))
        super().__init__(**kwargs)

    @property
    def intermediate_size(self):
        return self.ff_intermediate_size


class Phi3SmallSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c.hidden_size // c.num_attention_heads
        rows = (c.num_attention_heads + 2 * c.num_key_value_heads) * d
        self.query_key_value = nn.Linear(c.hidden_size, rows)
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)


class Phi3SmallMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.up_proj = nn.Linear(c.hidden_size, 2 * c.intermediate_size)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size)


class Phi3SmallDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Phi3SmallSelfAttention(c)
        self.mlp = Phi3SmallMLP(c)
        self.input_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_epsilon)
        self.post_attention_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_epsilon)


class Phi3SmallModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Phi3SmallDecoderLayer(c) for _ in range(c.num_hidden_layers)])
        self.final_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_epsilon)


class Phi3SmallForCausalLM(PreTrainedModel):
    config_class = Phi3SmallConfig
    base_model_prefix = "model"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = Phi3SmallModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head
