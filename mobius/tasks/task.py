"""A task is one object: everything mobius knows about a Hugging Face task.

The builder, the test harnesses, the EP suites, ``mobius list`` and
docs/models.md read a :class:`Task`; none of them branches on a task name.
Each task lives in its own file under mobius/tasks and is registered in
mobius/tasks/registry.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.graph_builder import GraphBuilder


@dataclasses.dataclass(frozen=True)
class TaskFlags:
    """Structural build-time switches a task may receive (never an EP name).

    use_concrete_dims: for runtimes that plan memory ahead (WebGPU). Guarantees
        (mobius/tasks/concrete_dims.py, checked on the finished package):
        (1) graph I/O: every dim fixed by the config (kv heads, head_dim,
        vocab) is an int and every other dim is one of the task's named dims --
        no anonymous/unknown dims, one name = one run-time size, so a runtime
        can pin them by name; the task raises if its I/O breaks this.
        (2) value_info: after the pipeline, every main-graph value has a dtype
        and a known-rank shape (ints where inferable, input names where
        inference ties them; only data-dependent lengths stay unknown).

    There is deliberately no int32-I/O flag: int64 -> int32 graph I/O is the
    lowering rule mobius/rewrite/int32_io.py (everything it needs is in the
    finished graph; see that module), so the task always declares the
    contract's int64 inputs.
    """

    use_concrete_dims: bool = False
    #: The decoder of a multi-model package (vision-language): its first input is
    #: ``inputs_embeds`` [batch, seq, hidden] (made by the package's embedding
    #: model) instead of ``input_ids``; the rest of the contract is unchanged.
    inputs_embeds: bool = False
    #: An encoder-decoder split the other way (Optimum's, mobius/package/optimum_layout.py):
    #: the encoder returns its hidden states only, and a ``first_step`` decoder takes them
    #: and projects the cross-attention K/V itself (no past inputs); the ``decoder``
    #: (with past) is unchanged. Tasks with ``cross_kv_in_decoder_io`` only.
    cross_kv_in_decoder: bool = False


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One graph input or output of the contract."""

    name: str
    #: None: the build dtype (float tensors follow --dtype)
    dtype: ir.DataType | None
    #: ints are fixed by the config; strings are named symbolic dims
    dims: tuple[int | str, ...]
    #: may be absent (position_ids where a family needs no positions)
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class ModelIO:
    """The contract of one model of a package."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclasses.dataclass(frozen=True)
class GenaiContext:
    """What the builder hands a task's package-config writer."""

    provider_options: list[dict[str, Any]]
    past_present_share_buffer: bool  #: the decoder fused GroupQueryAttention


@dataclasses.dataclass(frozen=True)
class PackageConfigs:
    """Config files a task adds to its package."""

    genai_config: dict[str, Any] | None = None
    #: file name -> JSON content (audio_processor_config.json, ...)
    extra_json: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Reference:
    """How tests compare a package with transformers (the runners live in testing/).

    ``runner`` names a comparison procedure shared by tasks ("greedy_decode":
    prefill + cached greedy steps; "single_pass": one forward over a padded
    batch; "image_pass": one forward over a batch of images (and label prompts);
    "vision_language" / "speech_seq2seq": their family parity tests).
    """

    auto_class: str  #: transformers auto class that loads the tiny checkpoint
    runner: str
    inputs: tuple[str, ...]  #: what is fed to both sides
    outputs: tuple[str, ...]  #: what is compared


Builder = Callable[[nn.Module, ArchitectureConfig, TaskFlags], Mapping[str, ir.Model]]
Contract = Callable[[nn.Module, ArchitectureConfig], Mapping[str, ModelIO]]
ConfigWriter = Callable[[nn.Module, ArchitectureConfig, GenaiContext], PackageConfigs]


@dataclasses.dataclass(frozen=True)
class Task:
    """One Hugging Face task (pipeline tag) and everything mobius does for it."""

    name: str  #: the Hugging Face pipeline tag
    summary: str  #: one line for ``mobius list`` and docs/models.md
    #: module, config, flags -> {package key: graph} (model.onnx / <key>.onnx)
    build: Builder
    #: package key -> optimizer role (mobius.roles)
    roles: Mapping[str, str]
    #: module, config -> {package key: its graph I/O}
    io: Contract
    #: every symbolic dim name the task's graph I/O may use (use_concrete_dims)
    named_dims: tuple[str, ...]
    reference: Reference
    #: module, config -> the I/O of the cross_kv_in_decoder split (TaskFlags); None: the
    #: task has no such split
    cross_kv_in_decoder_io: Contract | None = None
    #: genai_config.json (+ processor configs) for onnxruntime-genai; None: the
    #: package is for plain onnxruntime
    package_configs: ConfigWriter | None = None
    #: checkpoint folder -> task files beside config.json, read into extra
    #: config.raw keys (sentence-transformers' pooling); None: nothing to read
    read_extras: Callable[[str], Mapping[str, Any]] | None = None
    #: module, config -> processor files of the package, {file name: JSON content}
    #: (preprocessor_config.json of the image tasks); None: none
    processor_files: Callable[[nn.Module, ArchitectureConfig], Mapping[str, Any]] | None = None
    #: config -> ONNX metadata_props of every model (a classifier's id2label)
    metadata: Callable[[ArchitectureConfig], Mapping[str, str]] | None = None
    #: the special token ids the package or its runtime uses (genai_config.json, a
    #: generation loop's metadata): refused outside the vocabulary, others warned about
    token_ids: tuple[str, ...] = ()
    #: genai's KV cache is sized by the package's context length (--context-length)
    kv_cache_sized_by_context: bool = False
    #: the decoder may take num_logits_to_keep (mobius/tasks/logits_to_keep.py)
    takes_logits_to_keep: bool = False
    #: sentence-transformers loads the package (SentenceTransformer / CrossEncoder with
    #: backend="onnx"): a checkpoint's modules.json and module folders are carried
    sentence_transformers: bool = False
    #: (folder, config.json dict) -> writes a built-in tiny checkpoint's tokenizer and
    #: processor files; None: mobius/tiny/tokenizer.py's byte-level BPE tokenizer
    write_tiny_processor: Callable[[str, Mapping[str, Any]], None] | None = None

    def __str__(self) -> str:
        return self.name


def check_io(task: Task, io: Mapping[str, ModelIO], models: Mapping[str, ir.Model],
             dtype: ir.DataType) -> list[str]:
    """Where the built graphs' I/O differs from the contract (names, order, dtypes, dims)."""
    problems = []
    if set(io) != set(models):
        return [f"{task}: models {sorted(models)}, contract {sorted(io)}"]
    for key, model in models.items():
        for kind, specs, values in (("input", io[key].inputs, model.graph.inputs),
                                    ("output", io[key].outputs, model.graph.outputs)):
            present = {v.name for v in values}
            specs = [s for s in specs if not s.optional or s.name in present]
            if [s.name for s in specs] != [v.name for v in values]:
                problems.append(f"{key}: {kind}s {[v.name for v in values]}, "
                                f"contract {[s.name for s in specs]}")
                continue
            problems += [f"{key}: {kind} {v.name!r} {p}" for s, v in zip(specs, values)
                         if (p := _spec_problem(s, v, dtype))]
    return problems


def _spec_problem(spec: TensorSpec, value: ir.Value, dtype: ir.DataType) -> str | None:
    want = dtype if spec.dtype is None else spec.dtype
    if value.dtype != want:
        return f"has dtype {value.dtype}, contract {want}"
    dims = None if value.shape is None else [
        d if isinstance(d, int) else getattr(d, "value", d) for d in value.shape]
    if dims != list(spec.dims):
        return f"has dims {dims}, contract {list(spec.dims)}"
    return None


def new_graph(opset: int = 23) -> tuple[ir.Graph, GraphBuilder]:
    graph = ir.Graph([], [], nodes=[], opset_imports={"": opset}, name="main_graph")
    return graph, GraphBuilder(graph)


def add_inputs(builder: GraphBuilder, specs: tuple[TensorSpec, ...],
               dtype: ir.DataType) -> dict[str, ir.Value]:
    """The contract's inputs as graph inputs, by name."""
    return {s.name: builder.input(s.name, dtype if s.dtype is None else s.dtype, list(s.dims))
            for s in specs}


def add_outputs(builder: GraphBuilder, values: Mapping[str, ir.Value],
                specs: tuple[TensorSpec, ...], dtype: ir.DataType) -> None:
    """``values`` (by contract name) as the graph outputs, in contract order."""
    for spec in specs:
        add_output(builder, values[spec.name], spec.name,
                   dtype if spec.dtype is None else spec.dtype, spec.dims)


def add_output(builder: GraphBuilder, value: ir.Value, name: str, dtype: ir.DataType, shape):
    if value.producer() is None or value.name in {v.name for v in builder.graph.outputs}:
        value = builder.op.Identity(value)
    builder.add_output(value, name)
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape(list(shape))
