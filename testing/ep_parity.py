"""L3 EP parity: an EP's graph against the generic ("default") graph, both on ORT's CPU EP.

The generic graph of the same dtype is the reference (DESIGN.md: "the generic
graph is always valid ONNX and the reference for parity"). A prefill of a
batch of two rows is followed by ``steps`` greedy decode steps; the decode
tokens are chosen by the *reference* and fed to both graphs, so a near-tie
in the argmax can never make the two runs diverge. Compared at every step:

* logits at every real position (prefill padding positions are excluded:
  their outputs are undefined in both graphs);
* every ``present.*`` KV tensor, all slots (padding slots included: both
  graphs compute them from the same tokens and position ids).

Feeds follow each graph's declared input types (e.g. int32 ids for WebGPU).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.ep.registry import get_ep
from mobius.trial.tolerances import F32_ATOL, HALF_ULPS, spacing
from testing import ep_suite, parity

NP_DTYPES = {"f32": np.float32, "f16": np.float16}


def session(model: ir.Model | bytes, threads: int = 1):
    """An onnxruntime CPU-EP session for an in-memory model (weights included), or for its
    ONNX bytes (ep_suite.Built.onnx_bytes: serialized once for all of a build's sessions)."""
    import onnxruntime as ort

    if isinstance(model, ir.Model):
        model = ir.serde.serialize_model(model).SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model, options,
                                providers=["CPUExecutionProvider"])


@dataclasses.dataclass
class Run:
    logits: list[np.ndarray]  # per step, float32: prefill [b, s, v], then [b, 1, v] ...
    presents: list[list[np.ndarray]]  # per step: [present.0.key, present.0.value, ...] as float32
    #: per step: a hybrid's recurrent states (present.{i}.conv_state, ...) as float32
    states: list[list[np.ndarray]] = dataclasses.field(default_factory=list)


def run(sess, config, input_ids, attention_mask, steps: int, np_dtype,
        tokens=None) -> tuple[Run, list]:
    """Prefill + ``steps`` decode steps. Greedy tokens unless ``tokens`` are given."""
    types = {i.name: i.type for i in sess.get_inputs()}

    def feeds_for(ids, mask, past):
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "position_ids": parity.position_ids_for(mask, ids.shape[1]),
                 **(past if past is not None
                    else parity.initial_past(sess, config, ids.shape[0], np_dtype))}
        out = {}
        for name, value in feeds.items():
            if name not in types:
                continue
            if types[name] == "tensor(int32)":
                value = value.astype(np.int32)
            out[name] = value
        return out

    output_names = [o.name for o in sess.get_outputs()]
    present_names = [n for n in output_names if n.endswith((".key", ".value"))]
    state_names = [n for n in output_names if n.startswith("present.") and n not in present_names]
    result = Run([], [], [])
    chosen = []
    mask, ids, past = attention_mask, input_ids, None
    for step in range(steps + 1):
        feeds = feeds_for(ids, mask, past)
        values = (parity.run_session(sess, feeds) if hasattr(sess, "run_with_ort_values")
                  else sess.run(None, feeds))  # run_session: bf16 I/O through OrtValues
        outputs = dict(zip(output_names, values))
        past = parity.carried_past(outputs)
        result.logits.append(outputs["logits"].astype(np.float32))
        result.presents.append([outputs[n].astype(np.float32) for n in present_names])
        result.states.append([outputs[n].astype(np.float32) for n in state_names])
        if step == steps:
            break
        if tokens is None:
            next_token = result.logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
        else:
            next_token = tokens[step]
        chosen.append(next_token)
        ids = next_token
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
    return result, chosen


@dataclasses.dataclass
class Diff:
    logits: float  # max |a - b| over real positions, all steps
    present: float  # max |a - b| over the real (unmasked) slots of every present tensor
    logits_scale: float  # max |reference logit| (real positions)
    present_scale: float  # max |reference present| (real slots)
    per_step: list[float]

    def __str__(self):
        steps = ", ".join(f"{d:.3g}" for d in self.per_step)
        return (f"logits max|diff| {self.logits:.3g} (max|logit| {self.logits_scale:.3g}; "
                f"per step {steps}); present KV max|diff| {self.present:.3g} "
                f"(max|kv| {self.present_scale:.3g})")


def compare(reference: Run, candidate: Run, attention_mask: np.ndarray,
            presents: bool = True) -> Diff:
    """Differences over real positions / slots only.

    Prefill logits at padding positions, and present KV at padding slots, are
    excluded: they are masked out of every later step, so their values are
    undefined (a fully masked attention row is NaN, zero or uniform depending
    on the kernel, and layer >= 1 K/V at those slots are computed from it).
    """
    real = attention_mask.astype(bool)
    per_step = [float(np.abs(reference.logits[0] - candidate.logits[0])[real].max())]
    scale = float(np.abs(reference.logits[0])[real].max())
    for a, b in zip(reference.logits[1:], candidate.logits[1:]):
        per_step.append(float(np.abs(a - b).max()))
        scale = max(scale, float(np.abs(a).max()))
    present = present_scale = 0.0
    mask = real
    pairs = zip(reference.presents, candidate.presents) if presents else ()
    for step, (ref_step, cand_step) in enumerate(pairs):
        if step:
            mask = np.concatenate([mask, np.ones((mask.shape[0], 1), bool)], axis=1)
        for a, b in zip(ref_step, cand_step):
            assert a.shape == b.shape, (a.shape, b.shape)
            slots = mask[:, None, :, None]  # [batch, 1, total, 1] over [batch, kv, total, dim]
            slots = np.broadcast_to(slots, a.shape)
            present = max(present, float(np.abs(a - b)[slots].max()))
            present_scale = max(present_scale, float(np.abs(a)[slots].max()))
    state_pairs = zip(reference.states, candidate.states) if presents else ()
    for ref_step, cand_step in state_pairs:  # recurrent states: every entry is defined
        for a, b in zip(ref_step, cand_step):
            present = max(present, float(np.abs(a - b).max()))
            present_scale = max(present_scale, float(np.abs(a).max()))
    return Diff(max(per_step), present, scale, present_scale, per_step)


def tolerances(diff: Diff, dtype: str, spacings: int = HALF_ULPS) -> tuple[float, float]:
    """(logits, present) tolerance for ``dtype``.

    f32: 1e-4 absolute -- the EP kernels (GQA, Skip*LayerNorm) and the
    standard ops differ only in summation order, measured <= 1.5e-6.

    f16 / bf16: 8 spacings of the dtype at the tensor's largest magnitude.
    Both graphs round every intermediate to the dtype, but at different points
    (GQA accumulates QK^T and softmax in float32, Skip*LayerNorm sums the
    residual in float32, the standard-op graph rounds after each op). Each
    rounding moves a value by <= 1/2 spacing and a 2-4 layer model compounds
    a handful of them; measured worst case is 1.75 (f16) and 2.5 (bf16)
    spacings, so 8 leaves 3x headroom, while any real defect (wrong scale, swapped heads, a dropped
    norm) moves values by >= 10% of their scale, i.e. >100 spacings. bf16
    (run through onnx.reference) uses the same count of its coarser spacing.
    ``spacings`` widens it for a family whose attention logits are rounded far from
    the logits' scale (see UNSCALED_SPACINGS).
    """
    if dtype == "f32":
        return F32_ATOL, F32_ATOL
    return (spacings * spacing(diff.logits_scale, dtype),
            spacings * spacing(diff.present_scale, dtype))


#: low-precision spacings for the "unscaled_attention" trait (Gemma 4: normed Q/K at scale
#: 1, attention logits up to head_dim, rounded before the softmax at different points by
#: the fused and the standard graph): measured 8.6 (bf16) and 9.8 (f16) on the tiny model
UNSCALED_SPACINGS = 2 * HALF_ULPS


def assert_close(diff: Diff, dtype: str, what: str, spacings: int = HALF_ULPS) -> None:
    logits_tol, present_tol = tolerances(diff, dtype, spacings)
    assert diff.logits <= logits_tol and diff.present <= present_tol, (
        f"{what}: {diff}; tolerance logits {logits_tol:.3g}, present {present_tol:.3g}")


class ReferenceSession:
    """``onnx.reference.ReferenceEvaluator`` behind the part of InferenceSession used here.

    Custom (com.microsoft) ops are evaluated through their model-local
    function bodies -- this runs graphs the CPU EP cannot (bf16), and checks
    that the rewritten graph means the same as the generic one, but it does
    not exercise the EP's kernels. The bodies are inlined first (onnx_ir's
    InlinePass): onnx.reference looks functions up by (domain, name) only and
    would pick the wrong overload when one op has several (e.g. GQA with and
    without do_rotary in one SmolLM3 graph).
    """

    class _Arg:
        def __init__(self, name, type_, shape=()):
            self.name, self.type, self.shape = name, type_, shape

    def __init__(self, model: ir.Model | bytes):
        import onnx
        from onnx.reference import ReferenceEvaluator

        from onnx_ir.passes.common import InlinePass

        proto = (onnx.ModelProto.FromString(model) if isinstance(model, bytes)
                 else ir.serde.serialize_model(model))
        copy = ir.serde.deserialize_model(proto)
        InlinePass()(copy)
        self._evaluator = ReferenceEvaluator(ir.serde.serialize_model(copy))
        self._inputs = [self._Arg(v.name, f"tensor({_TYPE_NAMES.get(v.dtype, 'other')})",
                                  [d if isinstance(d, int) else str(d) for d in v.shape or ()])
                        for v in copy.graph.inputs]
        self._outputs = [self._Arg(v.name, None) for v in copy.graph.outputs]

    def get_inputs(self):
        return self._inputs

    def get_outputs(self):
        return self._outputs

    def run(self, output_names, feeds):
        return [np.asarray(v) for v in self._evaluator.run(output_names, feeds)]


_TYPE_NAMES = {ir.DataType.INT32: "int32", ir.DataType.INT64: "int64"}


def np_dtype(dtype: str):
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return NP_DTYPES[dtype]


#: decode steps after the prefill (a stored generic run has this many; fewer: its prefix)
STEPS = 3


def generic_run(generic_model: ir.Model | bytes, config, dtype: str, *, pad: int,
                steps: int = STEPS, prompt_len: int = 10, seed: int = 0,
                backend: str = "ort") -> tuple[Run, list]:
    """The reference side of :func:`ep_vs_generic`: the generic graph's run on the batch
    (row 1 left-padded by ``pad``) and the greedy tokens it chose."""
    make = session if backend == "ort" else ReferenceSession
    input_ids, attention_mask = parity.make_batch(config.vocab_size, prompt_len, pad, seed)
    return run(make(generic_model), config, input_ids, attention_mask, steps, np_dtype(dtype))


def truncate(reference: Run, tokens: list, steps: int) -> tuple[Run, list]:
    """A run's first ``steps`` decode steps: what a run of ``steps`` steps computes (each
    step reads only the earlier ones)."""
    return (Run(reference.logits[:steps + 1], reference.presents[:steps + 1],
                reference.states[:steps + 1]), tokens[:steps])


def ep_vs_generic(ep_model: ir.Model | bytes, generic_model: ir.Model | bytes, config,
                  dtype: str, *,
                  pad: int, steps: int = STEPS, prompt_len: int = 10, seed: int = 0,
                  backend: str = "ort", presents: bool = True,
                  reference: tuple[Run, list] | None = None) -> Diff:
    """Runs both graphs on the same batch (row 1 left-padded by ``pad``) and compares.

    ``backend``: "ort" (onnxruntime CPU EP) or "reference" (onnx.reference).
    ``presents``: also compare the present KV (else logits only).
    ``reference``: the generic graph's :func:`generic_run` with these arguments and
    STEPS steps, already made (testing/generic_runs.py); else it is run here. An EP
    graph byte-identical to the generic one is its run (:func:`same_graph`).
    """
    make = session if backend == "ort" else ReferenceSession
    input_ids, attention_mask = parity.make_batch(config.vocab_size, prompt_len, pad, seed)
    if reference is None:
        reference = generic_run(generic_model, config, dtype, pad=pad, steps=steps,
                                prompt_len=prompt_len, seed=seed, backend=backend)
    reference, tokens = truncate(*reference, steps)
    if same_graph(ep_model, generic_model):  # same bytes, backend, feeds and tokens: same run
        return compare(reference, reference, attention_mask, presents)
    candidate, _ = run(make(ep_model), config, input_ids, attention_mask, steps, np_dtype(dtype),
                       tokens=tokens)
    return compare(reference, candidate, attention_mask, presents)


def same_graph(a: ir.Model | bytes, b: ir.Model | bytes) -> bool:
    """Both are the same serialized graph: a session of one computes what the other's
    does (the CPU EP and onnx.reference are deterministic on one thread), so running it
    again can only repeat the run."""
    return isinstance(a, bytes) and a == b


def uses_fused_rotary(model: ir.Model) -> bool:
    """Whether some GroupQueryAttention applies RoPE itself (``do_rotary=1``)."""
    for node in model.graph:
        if node.domain == "com.microsoft" and node.op_type == "GroupQueryAttention":
            attr = node.attributes.get("do_rotary")
            if attr is not None and attr.value == 1:
                return True
    return False


_BF16_KERNELS = ("onnxruntime's CPU EP has no bfloat16 kernels for the standard ops every "
                 "decoder uses (session creation fails with NOT_IMPLEMENTED, first on Where)")

#: (EP, build dtype) graphs onnxruntime's CPU EP cannot run, and why. docs/eps.md lists
#: them (generated by //tools:eps_doc); ep/parity_test.py proves each really fails (and every
#: other one runs).
#: Derived from the registry: a bf16 build of an EP that computes bf16 natively
#: (EpCapabilities.compute_dtypes). "default" and "cpu" compute in f32/f16 only, so
#: their bf16 weights and I/O are cast to f32 around the compute (Float32Compute
#: lowering) and do run.
NOT_CPU_RUNNABLE: dict[tuple[str, str], str] = {
    (ep, "bf16"): _BF16_KERNELS for ep in ep_suite.EP_DTYPES
    if "bf16" in ep_suite.EP_DTYPES[ep] and get_ep(ep).computes(ir.DataType.BFLOAT16)
}


def cpu_runnable(ep: str, dtype: str) -> bool:
    return (ep, dtype) not in NOT_CPU_RUNNABLE


def assert_not_cpu_runnable(model: ir.Model | bytes, config, dtype: str) -> None:
    """The graph must fail on the CPU EP (keeps NOT_CPU_RUNNABLE and docs/eps.md truthful)."""
    try:
        sess = session(model)
        input_ids, attention_mask = parity.make_batch(config.vocab_size, 4, 0, 0)
        run(sess, config, input_ids, attention_mask, 0, np_dtype(dtype))
    except Exception as e:  # noqa: BLE001 -- any ORT failure qualifies
        assert "NOT_IMPLEMENTED" in str(e) or "implementation" in str(e).lower(), e
        return
    raise AssertionError(f"this {dtype} graph now runs on the CPU EP: update NOT_CPU_RUNNABLE "
                         "(testing/ep_parity.py) and docs/eps.md")


# --------------------------------------------------------------------------
# Self-consistency of the generic graph (the reference every EP is held to)


def recompute_diff(model: ir.Model, config, dtype: str, steps: int = 3) -> Diff:
    """KV-cached decode vs recomputing the whole sequence without a cache.

    Prefill + ``steps`` greedy decode steps on an unpadded batch; then one
    prefill over prompt + generated tokens. Step k's logits must equal the
    recompute's logits at that position (and the final present KV its present).
    """
    sess = session(model)
    input_ids, mask = parity.make_batch(config.vocab_size, 10, 0, 0)
    cached, tokens = run(sess, config, input_ids, mask, steps, np_dtype(dtype))
    full_ids = np.concatenate([input_ids, *tokens], axis=1)
    full, _ = run(sess, config, full_ids, np.ones_like(full_ids), 0, np_dtype(dtype))
    prompt = input_ids.shape[1]
    # Re-slice the one-shot run into prefill + per-step views to reuse compare().
    # A hybrid's recurrent state is the recompute's only after the last step; the earlier
    # steps' states are checked through the logits they feed.
    sliced = Run([full.logits[0][:, :prompt]] +
                 [full.logits[0][:, prompt + k - 1: prompt + k] for k in range(1, steps + 1)],
                 [[p[:, :, :prompt + k] for p in full.presents[0]] for k in range(steps + 1)],
                 [*cached.states[:steps], full.states[0]])
    return compare(sliced, cached, mask)


def padding_diff(model: ir.Model, config, dtype: str, pad: int = 3, steps: int = 3) -> Diff:
    """A left-padded row of a batch vs the same row alone, unpadded (batch of 1).

    Positions come from the attention mask, so padding must be invisible:
    the row's logits at real positions and its real KV slots must not change.
    """
    sess = session(model)
    input_ids, mask = parity.make_batch(config.vocab_size, 10, pad, 0)
    batched, tokens = run(sess, config, input_ids, mask, steps, np_dtype(dtype))
    alone, _ = run(sess, config, input_ids[1:, pad:], mask[1:, pad:], steps, np_dtype(dtype),
                   tokens=[t[1:] for t in tokens])
    row = Run([batched.logits[0][1:, pad:]] + [x[1:] for x in batched.logits[1:]],
              [[p[1:, :, pad:] for p in step] for step in batched.presents],
              [[p[1:] for p in step] for step in batched.states])
    return compare(alone, row, mask[1:, pad:])
