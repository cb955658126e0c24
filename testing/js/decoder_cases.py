"""Reference cases for the JavaScript decoder runner (testing/js/decoder_runner.mjs).

Python onnxruntime runs a package's decoder (a left-padded batch of two:
prefill, then greedy decode steps that feed ``present.*`` back as
``past_key_values.*``) and writes what it fed and the logits it got. The JS
runner replays the same feeds in onnxruntime-node or onnxruntime-web, carrying
its own KV cache, and reports its largest logit difference per step.
"""

from __future__ import annotations

import json
import os

import numpy as np

from testing import parity
from testing.model_runs import ort_session

#: onnxruntime type strings -> (numpy dtype, onnxruntime-common tensor type)
_TYPES = {"tensor(int64)": (np.int64, "int64"), "tensor(int32)": (np.int32, "int32"),
          "tensor(float)": (np.float32, "float32")}


def write_decoder_case(model_path: str, folder: str, *, steps: int = 3, prompt_len: int = 7,
                       pad: int = 2, seed: int = 0) -> str:
    """Runs ``model_path`` in Python onnxruntime; writes ``folder``/case.json; returns its path."""
    os.makedirs(folder, exist_ok=True)
    session = ort_session(model_path)
    inputs = {i.name: i for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    cache = {n: n.replace("present.", "past_key_values.", 1) for n in names if n.startswith("present.")}
    vocab = session.get_outputs()[0].shape[-1]
    ids, mask = parity.make_batch(vocab, prompt_len, pad, seed)
    past = {past_name: _empty_past(inputs[past_name], ids.shape[0]) for past_name in cache.values()}
    case_steps = []
    for step in range(steps + 1):
        plain = {"input_ids": ids, "attention_mask": mask,
                 "position_ids": parity.position_ids_for(mask, ids.shape[1])}
        feeds = {k: v.astype(_TYPES[inputs[k].type][0]) for k, v in plain.items() if k in inputs}
        result = dict(zip(names, session.run(None, {**feeds, **past})))
        logits_file = f"logits.{step}.bin"
        result["logits"].astype("<f4").tofile(os.path.join(folder, logits_file))
        shown = {**feeds, **past} if step == 0 else feeds
        case_steps.append({"feeds": {k: _tensor(inputs[k], v) for k, v in shown.items()},
                           "logits": {"file": logits_file, "dims": list(result["logits"].shape)}})
        past = {cache[n]: result[n] for n in cache}
        ids = result["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
    case = {"model": os.path.abspath(model_path), "cache": cache, "steps": case_steps,
            "prefill_mask": parity.make_batch(vocab, prompt_len, pad, seed)[1].tolist()}
    path = os.path.join(folder, "case.json")
    with open(path, "w") as f:
        json.dump(case, f)
    return path


def _empty_past(info, batch: int) -> np.ndarray:
    """A KV cache holds no slot yet; a recurrent state (every dim after batch fixed) is zeros."""
    dims = [batch, *info.shape[1:]]
    if info.name.endswith((".key", ".value")):
        dims[2] = 0
    return np.zeros(dims, _TYPES[info.type][0])


def _tensor(info, value: np.ndarray) -> dict:
    return {"type": _TYPES[info.type][1], "dims": list(value.shape),
            "data": value.reshape(-1).tolist()}
