"""The tensor bytes of llama.cpp's Q4_0 GGUF of a bench checkpoint, the size mobius' int4
package is held to (``bench size``; docs/benchmarks.md, "package size").

llama-quantize's type per tensor for ``Q4_0`` (src/llama-quant.cpp, no imatrix):
1-D tensors (norms) stay f32; the output matrix (and a tied token table, which
is the output) goes to Q6_K where its row length is a multiple of 256, else
Q8_0; every other matrix, the untied token table included, is Q4_0. Bytes
per block are ggml's: Q4_0 18 per 32 weights (f16 scale), Q6_K 210 per 256,
Q8_0 34 per 32. The file adds its metadata (the vocabulary strings) on top.
"""

from __future__ import annotations

#: ggml type -> (weights per block, bytes per block)
BLOCKS = {"Q4_0": (32, 18), "Q6_K": (256, 210), "Q8_0": (32, 34)}


def tensor_type(name: str, shape: tuple[int, ...], tied: bool) -> str:
    """llama-quantize's Q4_0-file type of the checkpoint tensor ``name``."""
    if len(shape) == 1:
        return "F32"
    output = name == "lm_head.weight" or (tied and name == "model.embed_tokens.weight")
    if output:
        return "Q6_K" if shape[-1] % BLOCKS["Q6_K"][0] == 0 else "Q8_0"
    if shape[-1] % BLOCKS["Q4_0"][0]:
        raise ValueError(f"{name}: rows of {shape[-1]} are not whole Q4_0 blocks")
    return "Q4_0"


def q4_0_bytes(tensors: list[tuple[str, tuple[int, ...]]], tied: bool) -> int:
    """Tensor bytes of the Q4_0 file of a checkpoint holding ``tensors`` (name, shape)."""
    total = 0
    for name, shape in tensors:
        count = 1
        for dim in shape:
            count *= dim
        kind = tensor_type(name, shape, tied)
        if kind == "F32":
            total += 4 * count
        else:
            per_block, nbytes = BLOCKS[kind]
            total += count // per_block * nbytes
    return total
