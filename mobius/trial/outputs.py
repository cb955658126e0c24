"""``mobius run`` for the packages plain onnxruntime runs: the prompt tokenized with the
package's tokenizer.json and the task's natural output (embeddings, labels with scores,
a token's labels, the masked token's candidates)."""

from __future__ import annotations

import json
import os

import numpy as np

from mobius.errors import MobiusError
from mobius.trial.package import Package

#: what each task's output is turned into
TASKS = ("feature-extraction", "text-classification", "token-classification", "fill-mask")
_TOP = 5


def run_text(package: Package, prompt: str) -> dict:
    """The task's output for ``prompt``, as JSON-ready data."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    path = os.path.join(package.folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise MobiusError(f"{package.folder}: tokenizer.json is missing; rebuild the package "
                          f"from a checkpoint that has one")
    tokenizer = Tokenizer.from_file(path)
    encoding = tokenizer.encode(prompt)
    session = ort.InferenceSession(package.model_file(), providers=["CPUExecutionProvider"])
    inputs = feeds(session, np.array([encoding.ids], np.int64))
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, inputs)))
    if package.task == "feature-extraction":
        return {name: {"shape": list(v.shape), "values": v.astype(np.float64).ravel().tolist()}
                for name, v in outputs.items()}
    logits = outputs["logits"].astype(np.float64)
    if package.task == "fill-mask":
        return _fill_mask(package, tokenizer, encoding.ids, logits[0])
    labels = _id2label(package)
    if package.task == "text-classification":
        return {"labels": _ranked(logits[0], labels)}
    return {"tokens": [{"token": tok, **_ranked(row, labels)[0]}
                       for tok, row in zip(encoding.tokens, logits[0])]}


def feeds(session, ids: np.ndarray) -> dict:
    """The encoder inputs the graph declares, from one row of ids."""
    made = {"input_ids": ids, "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None]}
    out = {}
    for spec in session.get_inputs():
        if spec.name not in made:
            raise MobiusError(f"mobius cannot feed the model's input {spec.name!r}")
        out[spec.name] = made[spec.name].astype(np.int32 if "int32" in spec.type else np.int64)
    return out


def _id2label(package: Package) -> dict[int, str]:
    from mobius.tasks.labels import id2label

    return id2label(package.config())


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _ranked(logits: np.ndarray, labels: dict[int, str]) -> list[dict]:
    """Labels by score (softmax; a single-logit reranker's raw score)."""
    scores = logits if logits.size == 1 else _softmax(logits)
    order = np.argsort(-scores, kind="stable")[:_TOP]
    return [{"label": labels.get(int(i), f"LABEL_{int(i)}"), "score": float(scores[i])}
            for i in order]


def _fill_mask(package: Package, tokenizer, ids: list[int], logits: np.ndarray) -> dict:
    mask = mask_token(package)
    mask_id = tokenizer.token_to_id(mask) if mask else None
    if mask_id is None or mask_id not in ids:
        raise MobiusError(f"a fill-mask prompt must hold the mask token {mask or '(none)'}")
    scores = _softmax(logits[ids.index(mask_id)])
    order = np.argsort(-scores, kind="stable")[:_TOP]
    return {"mask": mask, "candidates": [
        {"token": tokenizer.id_to_token(int(i)), "id": int(i), "score": float(scores[i])}
        for i in order]}


def mask_token(package: Package) -> str | None:
    path = os.path.join(package.folder, "tokenizer_config.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            token = json.load(f).get("mask_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            return token
    return None


def show(task: str, result: dict) -> str:
    """The result as lines a person reads."""
    if task == "feature-extraction":
        return "\n".join(f"{name} {v['shape']}: " + " ".join(f"{x:.4f}" for x in v["values"][:8])
                         + (" ..." if len(v["values"]) > 8 else "") for name, v in result.items())
    if task == "fill-mask":
        return "\n".join(f"{c['score']:.4f}  {c['token']}" for c in result["candidates"])
    if task == "text-classification":
        return "\n".join(f"{r['score']:.4f}  {r['label']}" for r in result["labels"])
    return "\n".join(f"{t['token']}\t{t['label']}\t{t['score']:.4f}" for t in result["tokens"])
