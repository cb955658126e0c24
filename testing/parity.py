"""Logit parity between an ONNX decoder and its transformers reference.

Runs a prefill of a left-padded batch followed by decode steps that feed
``present.*`` back as ``past_key_values.*``, on both sides, and reports the
largest absolute logit difference over the real (non-padding) positions.
Padding positions are excluded: their outputs are undefined in both.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class ParityResult:
    max_abs_diff: float
    steps: int


def make_batch(vocab_size: int, prompt_len: int = 10, pad: int = 3, seed: int = 0):
    """Two rows of ``prompt_len`` slots; row 1 is left-padded by ``pad`` tokens."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(4, vocab_size, size=(2, prompt_len), dtype=np.int64)
    attention_mask = np.ones((2, prompt_len), dtype=np.int64)
    attention_mask[1, :pad] = 0
    input_ids[1, :pad] = 0
    return input_ids, attention_mask


def position_ids_for(attention_mask: np.ndarray, seq_len: int) -> np.ndarray:
    """Positions as generation computes them: cumulative count of real tokens - 1."""
    positions = np.cumsum(attention_mask, axis=-1) - 1
    positions = np.where(attention_mask == 0, 1, positions)
    return positions[:, -seq_len:]


def run_onnx_decoder(session, input_ids, attention_mask, past, num_layers, kv_heads, head_dim,
                     np_dtype=np.float32):
    seq = input_ids.shape[1]
    feeds = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids_for(attention_mask, seq),
    }
    input_names = {i.name for i in session.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in input_names}
    for i in range(num_layers):
        if past is None:
            empty = np.zeros((input_ids.shape[0], kv_heads, 0, head_dim), dtype=np_dtype)
            feeds[f"past_key_values.{i}.key"] = empty
            feeds[f"past_key_values.{i}.value"] = empty
        else:
            feeds[f"past_key_values.{i}.key"] = past[i][0]
            feeds[f"past_key_values.{i}.value"] = past[i][1]
    outputs = run_session(session, feeds)
    names = [o.name for o in session.get_outputs()]
    result = dict(zip(names, outputs))
    presents = [(result[f"present.{i}.key"], result[f"present.{i}.value"]) for i in range(num_layers)]
    return result["logits"], presents


def initial_past(session, config, batch: int, np_dtype) -> dict[str, np.ndarray]:
    """Every ``past_key_values.*`` input of the session, empty / zero as on a first call:
    KV caches [batch, kv_heads, 0, head_dim]; a hybrid's recurrent states (conv_state,
    recurrent_state: every dim after batch fixed) zeros of their declared shape."""
    past = {}
    for spec in session.get_inputs():
        if not spec.name.startswith("past_key_values."):
            continue
        if spec.name.endswith((".key", ".value")):  # a layer's own kv heads / head_dim if fixed
            heads, head_dim = (d if isinstance(d, int) else default for d, default in
                               ((spec.shape[1], config.num_key_value_heads),
                                (spec.shape[3], config.head_dim)))
            shape = (batch, heads, 0, head_dim)
        else:
            shape = (batch, *spec.shape[1:])
        past[spec.name] = np.zeros(shape, np_dtype)
    return past


def carried_past(outputs: dict) -> dict[str, np.ndarray]:
    """``present.*`` outputs renamed to the ``past_key_values.*`` inputs of the next call."""
    return {"past_key_values." + name[len("present."):]: value
            for name, value in outputs.items() if name.startswith("present.")}


def run_session(session, feeds: dict) -> list[np.ndarray]:
    """session.run that also takes and returns bfloat16 arrays (ml_dtypes).

    onnxruntime's Python binding has no numpy type for bfloat16: such tensors
    travel as OrtValues over their raw 16-bit payload.
    """
    import ctypes

    import ml_dtypes
    import onnx
    import onnxruntime as ort

    bf16 = np.dtype(ml_dtypes.bfloat16)
    if not any(v.dtype == bf16 for v in feeds.values()) and not any(
            o.type == "tensor(bfloat16)" for o in session.get_outputs()):
        return session.run(None, feeds)
    values = {
        k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.ascontiguousarray(v).view(np.uint16), onnx.TensorProto.BFLOAT16)
        if v.dtype == bf16 else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v))
        for k, v in feeds.items()
    }
    results = []
    for value in session.run_with_ort_values(None, values):
        if value.data_type() == "tensor(bfloat16)":
            shape = value.shape()
            count = int(np.prod(shape))
            raw = (ctypes.c_uint16 * count).from_address(value.data_ptr()) if count else []
            results.append(np.array(raw, dtype=np.uint16).view(bf16).reshape(shape))
        else:
            results.append(value.numpy())
    return results


def onnx_greedy_logits(session, config, input_ids, attention_mask, steps: int, np_dtype=np.float32):
    """Prefill + ``steps`` greedy decode steps; returns per-step logits and chosen tokens.

    ``config`` is the model's mobius ArchitectureConfig.
    """
    kv, hd, layers = config.num_key_value_heads, config.head_dim, config.num_hidden_layers
    logits, past = run_onnx_decoder(session, input_ids, attention_mask, None, layers, kv, hd, np_dtype)
    all_logits = [logits.astype(np.float32)]
    tokens = []
    mask = attention_mask
    for _ in range(steps):
        next_token = all_logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens.append(next_token)
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
        logits, past = run_onnx_decoder(session, next_token, mask, past, layers, kv, hd, np_dtype)
        all_logits.append(logits.astype(np.float32))
    return all_logits, tokens


def hf_logits(model, input_ids, attention_mask, tokens):
    """transformers logits for the same prefill + the given decode tokens, with its KV cache."""
    import torch

    with torch.no_grad():
        ids = torch.from_numpy(input_ids)
        mask = torch.from_numpy(attention_mask)
        positions = torch.from_numpy(position_ids_for(attention_mask, input_ids.shape[1]))
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        all_logits = [out.logits.float().numpy()]
        cache = out.past_key_values
        for token in tokens:
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            positions = torch.from_numpy(position_ids_for(mask.numpy(), 1))
            out = model(input_ids=torch.from_numpy(token), attention_mask=mask,
                        position_ids=positions, cache=cache, use_cache=True)
            cache = out.past_key_values
            all_logits.append(out.logits.float().numpy())
    return all_logits


def compare_logits(onnx_steps, hf_steps, attention_mask) -> float:
    """Max |diff| over real positions (prefill: mask==1; decode steps: all)."""
    worst = 0.0
    prefill_real = attention_mask.astype(bool)
    diff = np.abs(onnx_steps[0] - hf_steps[0])[prefill_real]
    worst = max(worst, float(diff.max()))
    for a, b in zip(onnx_steps[1:], hf_steps[1:]):
        worst = max(worst, float(np.abs(a - b).max()))
    return worst
