"""Small FP8 and MXFP4 checkpoints, quantized here in the documented formats.

Written independently of mobius' readers, with numpy and ml_dtypes: a tiny
transformers checkpoint's float weights are quantized by this module's own
code and saved as real safetensors files next to a config.json carrying the
``quantization_config``; the exact float weights the codes stand for are saved
too, as a plain float checkpoint (the reference). ``check_f32_parity`` and
``check_same_package`` are the checks the parity tests run on them.

FP8 (transformers' fine-grained FP8): ``X.weight`` F8_E4M3 [N, K] and
``X.weight_scale_inv`` [ceil(N / bn), ceil(K / bk)], weight = code * scale of
its block; the scale of a block is its largest magnitude / 448 (the largest
E4M3 value), so every code is finite. MXFP4 (gpt-oss experts): a float
``X`` [E, K, R] is stored as ``X_blocks`` U8 [E, R, K / 32, 16] (two E2M1
codes per byte, lower nibble first) and ``X_scales`` U8 [E, R, K / 32]
(exponent + 127 of each block of 32).
"""

from __future__ import annotations

import json
import os
import re
import shutil

import ml_dtypes
import numpy as np

#: the Linears an FP8 checkpoint quantizes in a Llama-shaped decoder (lm_head stays float)
FP8_LINEARS = re.compile(r"\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$")
E4M3_MAX = 448.0
#: every E2M1 value, by code (bit 3: sign)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def fp8_config(block: tuple[int, int] | None = (128, 128), **extra) -> dict:
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
            "weight_block_size": None if block is None else list(block),
            "modules_to_not_convert": ["lm_head"], **extra}


def fp8_quantize(weight: np.ndarray, block: tuple[int, int] | None,
                 scale_dtype=np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes F8_E4M3 [N, K], scale_inv, the exact float32 weight they stand for)."""
    n, k = weight.shape
    bn, bk = block or (n, k)
    grid = (-(-n // bn), -(-k // bk))
    padded = np.zeros((grid[0] * bn, grid[1] * bk), np.float32)
    padded[:n, :k] = weight
    amax = np.abs(padded.reshape(grid[0], bn, grid[1], bk)).max(axis=(1, 3))
    scales = (np.maximum(amax, 1e-12) / E4M3_MAX).astype(scale_dtype)
    full = np.kron(scales.astype(np.float32), np.ones((bn, bk), np.float32))[:n, :k]
    codes = (weight / full).astype(ml_dtypes.float8_e4m3fn)
    exact = codes.astype(np.float32) * full
    return codes, np.ascontiguousarray(scales if block else scales.reshape(())), exact


def mxfp4_quantize(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float [E, K, R] -> (blocks U8 [E, R, K/32, 16], scales U8 [E, R, K/32], exact float)."""
    rows = np.swapaxes(weight, 1, 2).astype(np.float32)  # [E, R, K]
    e, r, k = rows.shape
    groups = rows.reshape(e, r, k // 32, 32)
    amax = np.abs(groups).max(axis=-1)
    exponent = np.ceil(np.log2(np.maximum(amax, 2.0**-100) / 6.0)).astype(np.int32)
    step = np.exp2(exponent.astype(np.float32))
    scaled = groups / step[..., None]
    codes = np.abs(np.abs(scaled)[..., None] - E2M1[:8]).argmin(axis=-1).astype(np.uint8)
    codes |= np.where(np.signbit(scaled), 8, 0).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    exact = (E2M1[codes] * step[..., None]).reshape(e, r, k)
    scales = np.ascontiguousarray(exponent + 127, np.uint8)  # save_file writes the buffer
    return np.ascontiguousarray(blocks), scales, np.ascontiguousarray(np.swapaxes(exact, 1, 2))


def write_fp8(folder: str, reference: str, quantization_config: dict,
              preset: str = "tiny-llama", seed: int = 0, scale_dtype=np.float32,
              **overrides) -> str:
    """A tiny ``preset`` checkpoint in ``folder`` with every decoder Linear FP8-quantized per
    ``quantization_config``; in ``reference`` the same model with those exact float weights."""
    block = quantization_config["weight_block_size"]
    block = None if block is None else tuple(block)

    def convert(name, array):
        if not FP8_LINEARS.search(name):
            return {name: array}, array
        codes, scales, exact = fp8_quantize(array, block, scale_dtype)
        return {name: codes, name + "_scale_inv": scales}, exact

    return _write(folder, reference, quantization_config, preset, seed, convert, overrides)


def write_mxfp4(folder: str, reference: str, seed: int = 0, **overrides) -> str:
    """A tiny gpt-oss checkpoint in ``folder`` with its expert stacks in MXFP4; in
    ``reference`` the same model with the exact float experts."""
    experts = re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)$")

    def convert(name, array):
        if not experts.search(name):
            return {name: array}, array
        blocks, scales, exact = mxfp4_quantize(array)
        return {name + "_blocks": blocks, name + "_scales": scales}, exact

    config = {"quant_method": "mxfp4",
              "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                         "model.embed_tokens", "lm_head"]}
    return _write(folder, reference, config, "tiny-gpt_oss", seed, convert, overrides)


def _write(folder, reference, quantization_config, preset, seed, convert, overrides) -> str:
    from safetensors.numpy import load_file, save_file

    from testing.hf_checkpoints import make_hf_checkpoint

    make_hf_checkpoint(reference, preset, seed=seed, **overrides)
    path = os.path.join(reference, "model.safetensors")
    stored, floats = {}, {}
    for name, array in sorted(load_file(path).items()):
        tensors, floats[name] = convert(name, array)
        stored.update(tensors)
    save_file(floats, path, metadata={"format": "pt"})
    os.makedirs(folder, exist_ok=True)
    save_file(stored, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    for file in os.listdir(reference):
        if file == "config.json":
            with open(os.path.join(reference, file)) as f:
                config = json.load(f)
            config["quantization_config"] = quantization_config
            with open(os.path.join(folder, file), "w") as f:
                json.dump(config, f, indent=2)
        elif not file.endswith(".safetensors"):
            shutil.copy(os.path.join(reference, file), os.path.join(folder, file))
    return folder


def check_f32_parity(folder: str, reference_model, ep: str = "cpu") -> float:
    """Builds ``folder`` in f32 and checks prefill + 2 decode steps against
    ``reference_model`` within 1e-5 of the logit scale; returns the largest difference."""
    from mobius.builder import build
    from testing.model_runs import BuiltPackage, f32_parity

    package = build(folder, execution_provider=ep, prefill_logits="all")
    path = package.save(os.path.join(folder + "-onnx", ep), overwrite=True)
    run = f32_parity(BuiltPackage(path, package.config, "f32"), reference_model, pad=0, steps=2)
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    assert run.max_abs_diff <= 1e-5 * scale, (run.max_abs_diff, scale)
    return run.max_abs_diff


def check_same_package(folder: str, float_folder: str, out: str, **options) -> list[str]:
    """Builds both folders with ``options``: the same initializers and the same logits,
    bit for bit (a quantized checkpoint is read as exactly the float one it encodes).
    Returns the quantized package's op types."""
    import onnx

    from mobius.builder import build
    from testing.model_runs import NUMPY_DTYPES, onnx_greedy, ort_session
    from testing.parity import make_batch

    packages = [build(source, prefill_logits="all", **options) for source in (folder, float_folder)]
    paths = [p.save(os.path.join(out, label)) for p, label in zip(packages, ("quantized", "float"))]
    models = [onnx.load(f"{p}/model.onnx") for p in paths]
    weights = [{t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
               for m in models]
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        np.testing.assert_array_equal(value, weights[1][key], err_msg=key)
    prompt = make_batch(packages[0].config.vocab_size, pad=0)
    runs = [onnx_greedy(ort_session(f"{p}/model.onnx"), package.config, *prompt, 2,
                        NUMPY_DTYPES[options.get("dtype", "f32")])
            for p, package in zip(paths, packages)]
    for a, b in zip(*(logits for logits, _ in runs)):
        np.testing.assert_array_equal(a, b)
    return [n.op_type for n in models[0].graph.node]
