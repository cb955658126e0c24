"""Logit error of quantized packages vs the float32 transformers reference (for tools/bench.py).

One prompt runs through the checkpoint in transformers (float32, the
reference) and, as a single prefill, through each package's model.onnx in
onnxruntime's CPU EP with the session settings genai uses by default; the
error is the largest |logit difference| over every prompt position, also
given relative to the largest reference logit.

The peer's int4 defaults (``onnxruntime_genai.models.builder -p int4 -e cpu``,
from its --extra_options help): block size 32, symmetric, accuracy level 4 on
CPU, lm_head quantized, embeddings not. mobius' cpu EP defaults are the same
(docs/eps.md), so both packages are built without extra options.
"""

from __future__ import annotations

import json
import os

import numpy as np

#: the comparison target of the quantized benchmark: mobius error / peer error
LOGIT_ERROR_TARGET = 1.1


def reference_logits(checkpoint: str, prompt: np.ndarray) -> np.ndarray:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.from_numpy(prompt[None].astype(np.int64))).logits[0].numpy()
    del model
    return logits


def package_logits(folder: str, prompt: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"),
                                providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], prefill_feeds(sess, folder, prompt))[0][0]
    del sess
    if len(logits) != len(prompt):  # would broadcast one row against every position
        raise RuntimeError(f"{folder}: logits for {len(logits)} of {len(prompt)} positions; "
                           f"build it with --prefill-logits all")
    return logits


def prefill_feeds(sess, folder: str, prompt: np.ndarray) -> dict:
    """One prefill of ``prompt`` (batch 1, empty KV cache) for the decoder session of the
    package ``folder`` (KV shapes from its genai_config.json)."""
    with open(os.path.join(folder, "genai_config.json")) as f:
        decoder = json.load(f)["model"]["decoder"]
    heads, dim = decoder["num_key_value_heads"], decoder["head_size"]
    feeds = {}
    for inp in sess.get_inputs():
        int_type = np.int32 if inp.type == "tensor(int32)" else np.int64
        if inp.name == "input_ids":
            feeds[inp.name] = prompt[None].astype(int_type)
        elif inp.name == "attention_mask":
            feeds[inp.name] = np.ones((1, len(prompt)), int_type)
        elif inp.name == "position_ids":
            feeds[inp.name] = np.arange(len(prompt))[None].astype(int_type)
        elif inp.name.startswith("past_key_values"):
            feeds[inp.name] = np.zeros((1, heads, 0, dim), np.float32)
        else:
            raise RuntimeError(f"{folder}: unexpected graph input {inp.name}")
    return feeds


def logit_errors(checkpoint: str, packages: dict[str, str], prompt_tokens: int) -> dict:
    """tool -> {max_abs, relative} against transformers f32, plus the mobius/peer ratio."""
    prompt = np.random.default_rng(1).integers(10, 500, size=prompt_tokens)
    reference = reference_logits(checkpoint, prompt)
    scale = float(np.abs(reference).max())
    out = {}
    for tool, folder in packages.items():
        error = float(np.abs(package_logits(folder, prompt) - reference).max())
        out[tool] = {"max_abs": round(error, 5), "relative": round(error / scale, 5)}
    if "mobius" in out and "peer" in out:
        out["ratio"] = round(out["mobius"]["max_abs"] / out["peer"]["max_abs"], 3)
        out["target"] = LOGIT_ERROR_TARGET
    return out
