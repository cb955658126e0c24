"""The "ctc" reference runner (Task.reference.runner): one forward of a right-padded
waveform batch through a CTC package (wav2vec2, HuBERT) and through transformers'
AutoModelForCTC, compared on ``logits`` at every frame of both rows.

Row 1 is zero-padded at the end, as Wav2Vec2FeatureExtractor pads; the
attention_mask goes to both sides only where the graph takes one (layer-norm
feature encoders), as transformers' processors do.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from testing import parity


@dataclasses.dataclass
class CtcRun:
    diff: float  # max |onnx - reference| over the logits
    onnx: np.ndarray  # float32 logits [batch, frames, vocab]
    reference: np.ndarray
    feeds: dict  # float32 / int64 inputs, as fed to transformers


def waveform_batch(session, samples: int = 1600, pad: int = 400, seed: int = 0) -> dict:
    """Two rows of ``samples`` N(0, 0.5) samples, row 1 zero-padded by ``pad``."""
    rng = np.random.default_rng(seed)
    values = (0.5 * rng.standard_normal((2, samples))).astype(np.float32)
    mask = np.ones((2, samples), np.int64)
    mask[1, samples - pad:] = 0
    values[1, samples - pad:] = 0.0
    feeds = {"input_values": values}
    if "attention_mask" in {i.name for i in session.get_inputs()}:
        feeds["attention_mask"] = mask
    return feeds


def run_onnx(session, feeds: dict, np_dtype) -> np.ndarray:
    typed = {k: v.astype(np_dtype) if v.dtype == np.float32 else v for k, v in feeds.items()}
    (logits,) = parity.run_session(session, typed)
    return np.asarray(logits).astype(np.float32)


def run_reference(folder: str, feeds: dict) -> np.ndarray:
    import torch

    from testing.hf_checkpoints import load_hf_model

    with torch.no_grad():
        out = load_hf_model(folder)(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return out.logits.float().numpy()


def ctc_parity(session, folder: str, np_dtype=np.float32, samples: int = 1600, pad: int = 400,
               seed: int = 0) -> CtcRun:
    feeds = waveform_batch(session, samples, pad, seed)
    onnx_logits = run_onnx(session, feeds, np_dtype)
    reference = run_reference(folder, feeds)
    assert onnx_logits.shape == reference.shape, (onnx_logits.shape, reference.shape)
    return CtcRun(float(np.abs(onnx_logits - reference).max()), onnx_logits, reference, feeds)
