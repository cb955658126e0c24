"""GGUF tensor names -> the Hugging Face checkpoint names the families read.

llama.cpp renames every tensor (``blk.{i}.attn_q.weight`` for
``model.layers.{i}.self_attn.q_proj.weight``); this table names them back so
the families bind to a GGUF file exactly as to the safetensors folder it was
converted from. One table per GGUF architecture: the same GGUF name can stand
for different HF modules (Gemma 2's ``ffn_norm`` is its pre-feed-forward norm).
"""

from __future__ import annotations

import re

from mobius.errors import WeightsError

_GLOBAL = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

_LLAMA_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_QWEN3_BLOCK = {**_LLAMA_BLOCK, "attn_q_norm": "self_attn.q_norm",
                "attn_k_norm": "self_attn.k_norm"}

#: Phi-3 keeps q/k/v and gate/up fused, as its HF checkpoint does
_PHI3_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_up": "mlp.gate_up_proj",
    "ffn_down": "mlp.down_proj",
}

#: Gemma 2 / 3: a norm before and after attention and the MLP
_GEMMA2_BLOCK = {**_LLAMA_BLOCK, "post_attention_norm": "post_attention_layernorm",
                 "ffn_norm": "pre_feedforward_layernorm",
                 "post_ffw_norm": "post_feedforward_layernorm"}
_GEMMA3_BLOCK = {**_GEMMA2_BLOCK, "attn_q_norm": "self_attn.q_norm",
                 "attn_k_norm": "self_attn.k_norm"}

#: GGUF architecture -> its block table
BLOCK_NAMES = {"llama": _LLAMA_BLOCK, "qwen2": _LLAMA_BLOCK, "qwen3": _QWEN3_BLOCK,
               "phi3": _PHI3_BLOCK, "gemma": _LLAMA_BLOCK, "gemma2": _GEMMA2_BLOCK,
               "gemma3": _GEMMA3_BLOCK}

_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_TOP = re.compile(r"(\w+)\.(weight|bias)")


def hf_name(arch: str, name: str) -> str:
    """The HF name of GGUF tensor ``name``; WeightsError for one mobius does not map."""
    block = _BLOCK.fullmatch(name)
    if block is not None:
        layer, part, kind = block.groups()
        module = BLOCK_NAMES[arch].get(part)
        if module is not None:
            return f"model.layers.{layer}.{module}.{kind}"
    top = _TOP.fullmatch(name)
    if top is not None and top.group(1) in _GLOBAL:
        return f"{_GLOBAL[top.group(1)]}.{top.group(2)}"
    raise WeightsError(f"GGUF tensor {name!r} has no Hugging Face name that mobius knows for "
                       f"architecture {arch!r} (e.g. rope_freqs: Llama 3 RoPE factors "
                       f"are not read)")
