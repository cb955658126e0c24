"""The "ctc" reference runner (Task.reference.runner): one forward of a right-padded
waveform batch through a CTC package (wav2vec2, HuBERT) and through transformers'
AutoModelForCTC, compared on ``logits`` at every frame of both rows.

Row 1 is zero-padded at the end, as Wav2Vec2FeatureExtractor pads; the
attention_mask goes to both sides only where the graph takes one (layer-norm
feature encoders), as transformers' processors do.

``record`` runs transformers (torch) with and without the mask; ``save`` / ``load`` keep
it as an .npz, so that a test compares against logits recorded at build time (the
reference_cases rule, //rules:references.bzl) without importing torch.
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


@dataclasses.dataclass(frozen=True)
class CtcReference:
    feeds: dict  # input_values and attention_mask (fed where the graph takes it)
    masked: np.ndarray  # transformers' float32 logits fed the attention_mask
    unmasked: np.ndarray  # fed input_values alone


def waveform_batch(samples: int = 1600, pad: int = 400, seed: int = 0) -> dict:
    """Two rows of ``samples`` N(0, 0.5) samples, row 1 zero-padded by ``pad``, and the
    attention_mask."""
    rng = np.random.default_rng(seed)
    values = (0.5 * rng.standard_normal((2, samples))).astype(np.float32)
    mask = np.ones((2, samples), np.int64)
    mask[1, samples - pad:] = 0
    values[1, samples - pad:] = 0.0
    return {"input_values": values, "attention_mask": mask}


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


def record(folder: str, samples: int = 1600, pad: int = 400, seed: int = 0) -> CtcReference:
    """transformers' logits on waveform_batch, fed the attention_mask and not."""
    feeds = waveform_batch(samples, pad, seed)
    return CtcReference(feeds, run_reference(folder, feeds),
                        run_reference(folder, {"input_values": feeds["input_values"]}))


def save(reference: CtcReference, path: str) -> str:
    np.savez(path, masked=reference.masked, unmasked=reference.unmasked, **reference.feeds)
    return path


def load(path: str) -> CtcReference:
    with np.load(path) as data:
        return CtcReference({k: data[k] for k in ("input_values", "attention_mask")},
                            data["masked"], data["unmasked"])


def ctc_parity(session, reference: CtcReference, np_dtype=np.float32) -> CtcRun:
    """The package's logits on the recorded batch, the mask fed where the graph takes it,
    against transformers' logits on the same inputs."""
    masked = "attention_mask" in {i.name for i in session.get_inputs()}
    feeds = {k: v for k, v in reference.feeds.items() if masked or k != "attention_mask"}
    onnx_logits = run_onnx(session, feeds, np_dtype)
    expected = reference.masked if masked else reference.unmasked
    assert onnx_logits.shape == expected.shape, (onnx_logits.shape, expected.shape)
    return CtcRun(float(np.abs(onnx_logits - expected).max()), onnx_logits, expected, feeds)
