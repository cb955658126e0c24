"""Build a mobius package from a local checkpoint and run it next to transformers.

Shared by the L1 (families), L3 (parity) and RoPE end-to-end tests::

    ckpt = make_hf_checkpoint(tmp / "ckpt", "tiny-llama")
    built = build_package(ckpt, tmp / "onnx", dtype="f32")
    result = f32_parity(built, load_hf_model(ckpt))
    assert result.max_abs_diff <= 1e-4

Everything runs on CPU. onnxruntime's CPU EP has no bfloat16 kernels for
MatMul/Add/Mul/..., so bf16 graphs are executed with ``onnx.reference``
(the ONNX reference implementation) instead; see :func:`run_reference`.
"""

from __future__ import annotations

import dataclasses
import os

import ml_dtypes
import numpy as np

from testing import decoder_reference, parity
from testing.decoder_reference import DecoderReference

NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


@dataclasses.dataclass
class BuiltPackage:
    path: str  # the package folder
    config: object  # mobius ArchitectureConfig
    dtype: str

    @property
    def model_path(self) -> str:
        return os.path.join(self.path, "model.onnx")

    @property
    def np_dtype(self):
        return NUMPY_DTYPES[self.dtype]


def build_package(checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
                  dtype: str = "f32", ep: str = "default") -> BuiltPackage:
    """mobius.build + save, the same path the CLI takes, with every prompt position's
    logits (what the parity checks compare)."""
    from mobius.builder import build

    package = build(str(checkpoint), dtype=dtype, execution_provider=ep, prefill_logits="all")
    path = package.save(str(out_dir), overwrite=True)
    return BuiltPackage(path=path, config=package.config, dtype=dtype)


def ort_session(model_path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    # one thread: tiny models, and Bazel runs two tests at once on two cores (a second
    # intra-op thread only spins; -10% CPU on granitemoehybrid_test)
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


class ReferenceSession:
    """``onnx.reference.ReferenceEvaluator`` behind the small part of the
    ``onnxruntime.InferenceSession`` interface that testing/parity.py uses."""

    def __init__(self, model_path: str):
        import onnx
        from onnx.reference import ReferenceEvaluator

        model = onnx.load(model_path)
        self._inputs = [_Named(i.name, [d.dim_param or d.dim_value
                                        for d in i.type.tensor_type.shape.dim])
                        for i in model.graph.input]
        self._outputs = [o.name for o in model.graph.output]
        self._evaluator = ReferenceEvaluator(model)

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return [_Named(n) for n in self._outputs]


    def run(self, output_names, feeds):
        outputs = self._evaluator.run(output_names, feeds)
        return [np.asarray(o) for o in outputs]


@dataclasses.dataclass
class _Named:
    name: str
    shape: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ParityRun:
    max_abs_diff: float
    onnx_steps: list  # per step logits, float32: [prefill [b, s, v], decode [b, 1, v] ...]
    hf_steps: list
    attention_mask: np.ndarray  # the prefill mask
    tokens: list  # the decode tokens fed to both sides (transformers' greedy choices)


def run_decoder(session, feeds: dict) -> dict[str, np.ndarray]:
    """One call of an ORT or Reference session; outputs by name."""
    names = [o.name for o in session.get_outputs()]
    if isinstance(session, ReferenceSession):
        outputs = session.run(None, feeds)
    else:
        outputs = parity.run_session(session, feeds)
    return dict(zip(names, outputs))


def onnx_greedy(session, config, input_ids, attention_mask, steps: int, np_dtype):
    """Prefill + ``steps`` greedy decode steps: (per-step float32 logits, chosen tokens)."""
    return onnx_decode(session, config, input_ids, attention_mask, steps, np_dtype)


def onnx_replay(session, config, reference: DecoderReference, np_dtype) -> list[np.ndarray]:
    """Prefill + one decode step per token of ``reference``, fed those tokens: per-step
    float32 logits, aligned with ``reference.logits``."""
    logits, _ = onnx_decode(session, config, reference.input_ids, reference.attention_mask,
                            len(reference.tokens), np_dtype, tokens=reference.tokens)
    return logits


def onnx_decode(session, config, input_ids, attention_mask, steps: int, np_dtype,
                tokens: list[np.ndarray] | None = None):
    """Prefill + ``steps`` decode steps, each fed ``tokens[step]`` (greedy when None):
    (per-step float32 logits, the tokens fed)."""
    inputs = {i.name for i in session.get_inputs()}
    past = parity.initial_past(session, config, input_ids.shape[0], np_dtype)
    ids, mask = input_ids, attention_mask
    all_logits, fed = [], []
    for step in range(steps + 1):
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "position_ids": parity.position_ids_for(mask, ids.shape[1]), **past}
        result = run_decoder(session, {k: v for k, v in feeds.items() if k in inputs})
        all_logits.append(result["logits"].astype(np.float32))
        past = parity.carried_past(result)
        if step == steps:
            break
        ids = (tokens[step] if tokens is not None
               else all_logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64))
        fed.append(ids)
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
    return all_logits, fed


#: The low-precision tolerance: |onnx_lowp - transformers_f32| <= 4 eps(dtype) x
#: max(1, max|logit|) (rounding of the weights and activations alone stays well inside
#: it on tiny models; a real bug shows at the scale of the logits).
LOW_PRECISION_EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


def low_precision_atol(run: ParityRun, dtype: str) -> float:
    """The low-precision tolerance for ``run``'s reference logits (see LOW_PRECISION_EPS)."""
    scale = max(1.0, max(float(np.abs(h).max()) for h in run.hf_steps))
    return 4 * LOW_PRECISION_EPS[dtype] * scale


def assert_low_precision_parity(folder: str, dtype: str, out_dir, hf_model, label: str) -> None:
    """Builds ``folder`` in ``dtype`` (default EP, every position's logits) and checks prefill
    + 3 cached steps on a left-padded batch against transformers f32 (low_precision_atol)."""
    from mobius.builder import build

    package = build(folder, dtype=dtype, prefill_logits="all")
    path = package.save(str(out_dir))
    run = f32_parity(BuiltPackage(path, package.config, dtype), hf_model, pad=3, steps=3)
    atol = low_precision_atol(run, dtype)
    assert run.max_abs_diff <= atol, f"{label} {dtype}: {run.max_abs_diff:.3g} > {atol:.3g}"


def f32_parity(built: BuiltPackage, reference, *, session=None, prompt_len: int = 10,
               steps: int = 3, pad: int = 3, seed: int = 0) -> ParityRun:
    """Prefill (batch 2, row 1 left-padded by ``pad``) + ``steps`` cached decode steps,
    against the float32 transformers run whatever the build dtype.

    ``reference``: a DecoderReference (recorded at build time: testing/decoder_reference.py;
    its own prompt, cut to ``steps``) or a transformers model, recorded now. The decode
    tokens are transformers' greedy choices, fed to both sides, so a difference can never
    come from diverging generations.
    """
    if isinstance(reference, DecoderReference):
        if steps > len(reference.tokens):
            raise ValueError(f"the reference has {len(reference.tokens)} decode steps, "
                             f"not {steps}")
        reference = reference.first(steps)
    else:
        reference = decoder_reference.record(reference, built.config.vocab_size,
                                             prompt_len=prompt_len, steps=steps, pad=pad,
                                             seed=seed)
    session = session or ort_session(built.model_path)
    onnx_steps = onnx_replay(session, built.config, reference, built.np_dtype)
    diff = parity.compare_logits(onnx_steps, reference.logits, reference.attention_mask)
    return ParityRun(diff, onnx_steps, reference.logits, reference.attention_mask,
                     reference.tokens)


def real_positions(run: ParityRun):
    """Yields (onnx, hf) logit rows [n, vocab] of every non-padding position, all steps."""
    mask = run.attention_mask.astype(bool)
    yield run.onnx_steps[0][mask], run.hf_steps[0][mask]
    for a, b in zip(run.onnx_steps[1:], run.hf_steps[1:]):
        yield a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])


def make_family_checkpoint(folder: str, family, seed: int = 0, **overrides) -> str:
    """A transformers-written tiny checkpoint of ``family`` (its tiny preset + overrides),
    saved by its task's auto class (testing/hf_checkpoints.py)."""
    from testing.hf_checkpoints import make_hf_checkpoint

    return make_hf_checkpoint(folder, family.tiny_preset, seed=seed, **overrides)


def family_checkpoint(folder: str, family) -> str:
    """hf_checkpoints.seed0_checkpoint of ``family``'s tiny preset: read it, never write."""
    from testing.hf_checkpoints import seed0_checkpoint

    return seed0_checkpoint(folder, family.tiny_preset)


def op_counts(model_path: str) -> dict[str, int]:
    """Node count per op of a saved model's main graph (``domain::op`` for custom domains)."""
    import collections

    import onnx

    graph = onnx.load(model_path, load_external_data=False).graph
    return dict(collections.Counter(
        f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        for n in graph.node))
