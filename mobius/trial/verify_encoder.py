"""``mobius verify`` for a text encoder (embeddings, classifiers, fill-mask): each output
of the package through onnxruntime against transformers' output of the same name on the
fixed prompts; for a quantized package, the cosine of each output row to the float one."""

from __future__ import annotations

import os

import numpy as np

from mobius.errors import MobiusError
from mobius.tasks.registry import get_task
from mobius.trial.comparison import PROMPTS, Check, max_diff_check
from mobius.trial.package import Package

#: a quantized encoder fails below this cosine of any output row to the float model's:
#: int4 all-MiniLM-L6-v2 sentence embeddings measure a minimum of 0.945-0.963
#: (docs/benchmarks.md); a broken package gives rows near 0
QUANT_COSINE_LIMIT = 0.9


def check_encoder(package: Package, checkpoint: str, torch, transformers) -> list[Check]:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from mobius.trial.outputs import feeds

    path = os.path.join(package.folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise MobiusError(f"{package.folder}: tokenizer.json is missing; rebuild the package")
    tokenizer = Tokenizer.from_file(path)
    session = ort.InferenceSession(package.model_file(), providers=["CPUExecutionProvider"])
    auto = getattr(transformers, get_task(package.task).reference.auto_class)
    hf = auto.from_pretrained(checkpoint, dtype=torch.float32).eval()
    names = [o.name for o in session.get_outputs()]
    pairs: dict[str, list] = {}
    for prompt in PROMPTS:
        inputs = feeds(session, np.array([tokenizer.encode(prompt).ids], np.int64))
        with torch.no_grad():
            theirs = hf(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in inputs.items()})
        for name, ours in zip(names, session.run(None, inputs)):
            if getattr(theirs, name, None) is not None:
                pairs.setdefault(name, []).append(
                    (ours.astype(np.float64), getattr(theirs, name).double().numpy()))
    checks = [_output_check(name, pairs[name], package) for name in names if name in pairs]
    checks += [Check(f"{name}: not an output of transformers' {auto.__name__}; not compared")
               for name in names if name not in pairs]
    return checks


def _output_check(name: str, pairs: list, package: Package) -> Check:
    diff = max(float(np.abs(a - b).max()) for a, b in pairs)
    scale = max(float(np.abs(b).max()) for _, b in pairs)
    check = max_diff_check(name, diff, scale, package, len(pairs))
    if not package.quant:
        return check
    cosine = min(_min_cosine(a, b) for a, b in pairs)
    return Check(check.text + f"; min cosine to the float model {cosine:.4f} (limit "
                 f"{QUANT_COSINE_LIMIT})", cosine >= QUANT_COSINE_LIMIT)


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest cosine between matching rows (the last axis) of ``a`` and ``b``."""
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(((a * b).sum(1) / np.maximum(norms, 1e-30)).min())
