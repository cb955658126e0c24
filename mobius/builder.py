"""The public build entry points: checkpoint or module -> ModelPackage."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import nn

from mobius.build_args import check_build_args
from mobius.builder_mtp import add_mtp_head, check_mtp
from mobius.config.architecture import ArchitectureConfig, load_config
from mobius.context import build_context
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.errors import MobiusError
from mobius.gguf_source import open_gguf
from mobius.models.registry import family_for
from mobius.optimize.pipeline import clean_up, optimize_model
from mobius.package.context_length import apply_context_length, resolve_context_length
from mobius.package.hf_folder import model_folder_files
from mobius.package.model_package import ModelPackage
from mobius.package.provider_options import genai_provider_options
from mobius.package.sliding_window import apply_sliding_window_cache
from mobius.package.tokenizer_files import find_tokenizer_files
from mobius.package.transformers_js import GENAI, TRANSFORMERS_JS, check_layout, to_client_files
from mobius.quantize.calibration import load_calibration
from mobius.quantize.prequantized import prequantized_spec
from mobius.quantize.spec import QuantSpec, check_overrides_match
from mobius.request import (MERGED, AdapterOptions, BuildRequest, RuntimeOptions,
                            check_supported)
from mobius.roles import DECODER
from mobius.shared_construction import constructed
from mobius.source import resolve_checkpoint
from mobius.tasks.concrete_dims import apply_concrete_dims
from mobius.tasks.logits_to_keep import ALL, LAST, add_logits_to_keep, keep_last_logits
from mobius.tasks.lora_inputs import add_lora_defaults, add_lora_inputs
from mobius.tasks.registry import get_task
from mobius.tasks.task import GenaiContext, Task, TaskFlags, check_io
from mobius.weights.attach import attach_weights
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype
from mobius.weights.lora import LoraMergedCheckpoint
from mobius.weights.lora_adapter import LoraAdapter, union_targets
from mobius.weights.plausibility import check_config_fits_checkpoint
from mobius.weights.prequantized_checkpoint import PrequantizedCheckpoint, open_checkpoint

logger = logging.getLogger(__name__)

def build(
    model: str | os.PathLike,
    *,
    execution_provider: str | EpCapabilities = "default",
    dtype: str | ir.DataType = "f32",
    trace_optimization: bool = False,
    progress: bool = False,
    quant: str | None = None,
    quant_block_size: int | None = None,
    quant_symmetric: bool | None = None,
    quant_accuracy_level: int | None = None,
    quant_lm_head: bool | None = None,
    quant_embedding: bool | None = None,
    quant_override: str | tuple = (),
    quant_method: str | None = None,
    quant_calibration: str | os.PathLike | None = None,
    quant_calibration_passes: int | None = None,
    layout: str = GENAI,
    logits_to_keep: bool | None = None,
    prefill_logits: str | None = None,
    context_length: int | None = None,
    adapter: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    adapter_mode: str = MERGED,
    sliding_window_cache: bool = False,
    mtp: bool = False,
) -> ModelPackage:
    """Builds an ONNX package from a hub id, a local HF folder, a GGUF file (or a folder
    holding one: mobius/gguf_source.py) or a built-in tiny name.

    ``quant`` ("int4" / "int8") quantizes every Linear's weights (``dtype`` is
    then the activations'); the ``quant_*`` options default per EP
    (EpCapabilities). The EP, dtype and quantization are validated before
    anything is downloaded or read. ``quant_calibration``: a UTF-8 text file;
    the float model's activations on it fit the quantized weights (GPTQ,
    mobius/quantize/gptq.py), instead of rounding each weight alone;
    ``quant_calibration_passes``: runs over it (mobius/quantize/sequential.py).

    ``layout``: "genai" or "transformers.js" (the folder's client).
    ``logits_to_keep`` adds the decoder input ``num_logits_to_keep``
    (mobius/tasks/logits_to_keep.py); default: where the layout's client
    feeds it (transformers.js), not for onnxruntime-genai 0.18.
    ``prefill_logits``: "last" computes a causal LM's logits for the last
    position only ([batch, 1, vocab]: what generation reads, and the form
    onnxruntime-genai runs as a pruned model), "all" for every position;
    default "last" in the genai layout unless ``logits_to_keep``.
    ``context_length``: genai_config's context length and KV size
    (mobius/package/context_length.py; default min(max positions, 4096)).
    ``adapter``: PEFT LoRA adapter folder(s) (``[NAME=]PATH``): one merged into
    the weights (mobius/weights/lora.py), or with ``adapter_mode="separate"``
    each written as adapters/NAME.onnx_adapter for onnxruntime-genai's Adapters
    API, the base graph taking the LoRA matrices as inputs
    (mobius/weights/lora_adapter.py).
    ``sliding_window_cache``: window-sized KV buffers for sliding-window layers
    where genai and the EP can (mobius/package/sliding_window.py; opt-in: such
    a package runs batch 1 in onnxruntime-genai only).
    ``mtp``: the checkpoint's multi-token-prediction head as the package's ``mtp/`` folder,
    the drafter of onnxruntime-genai's MtpGenerator (mobius/tasks/mtp.py; implies
    prefill_logits "all").
    """
    options = dict(locals())
    check_build_args(options)  # every argument, by name, before anything else
    return build_request(BuildRequest.from_options(**options))


def build_request(request: BuildRequest) -> ModelPackage:
    """The pipeline behind ``build``: check the request, read the source's config, open its
    weights, construct the module, build and optimize its graphs, then package them."""
    target = request.target()  # EP, dtype, layout, quantization: before anything is read
    source = _open_source(request, target)
    runtime = request.runtime
    checkpoint, adapters = _open_adapters(source.checkpoint, request.adapters, runtime.layout,
                                          target.caps)
    family, config = source.family, source.config
    if runtime.mtp:
        check_mtp(family, config, checkpoint)
    module, models, cleaned = constructed(_construction_key(source, checkpoint, target),
                                          lambda: _construct(source, checkpoint, target),
                                          prepare=_clean_up)
    check_overrides_match(source.quant, _override_targets(module, config))
    package = _optimized_package(models, module, config, family.task, target.caps, target.dtype,
                                 request.trace_optimization, source.quant,
                                 union_targets(adapters), cleaned)
    _carry_adapters(package, adapters)
    if runtime.mtp:
        add_mtp_head(package, source.family, config, checkpoint, target, source.quant,
                     request.trace_optimization)
    context_length = resolve_context_length(runtime.context_length,
                                            config.max_position_embeddings,
                                            target.caps.static_context_length)
    _client_options(package, family.task, target.caps, runtime, context_length)
    _package_files(package, source, request, target, context_length)
    to_client_files(package, runtime.layout)
    return package


def _construct(source: _Source, checkpoint, target) -> tuple[nn.Module, dict[str, ir.Model]]:
    """The module with its weights attached, and the task's generic (unoptimized) graphs."""
    family, config = source.family, source.config
    with build_context(target.caps, target.dtype):
        module = family.module(config)
    attach_weights(module, checkpoint, family.checkpoint_prefixes, family.checkpoint_aliases,
                   family.ignored_tensors(config))
    return module, _task_graphs(module, config, family.task, target.caps, target.dtype,
                                target.cross_kv_in_decoder)


def _clean_up(models: dict[str, ir.Model]) -> dict[str, list]:
    """The pipeline's target-independent cleanup of each generic graph, and its records."""
    return {key: clean_up(model) for key, model in models.items()}


def _construction_key(source: _Source, checkpoint, target) -> tuple | None:
    """What construction reads (mobius/shared_construction.py); None where the weights are
    not the folder's plain tensors (GGUF, merged adapters, prequantized checkpoints)."""
    if source.gguf or checkpoint is not source.checkpoint or isinstance(
            checkpoint, PrequantizedCheckpoint):
        return None
    return (source.folder, target.dtype, target.caps.use_concrete_dims,
            target.cross_kv_in_decoder)


@dataclasses.dataclass
class _Source:
    """A checkpoint read up to its weights: config, family and the weights' reader."""

    folder: str
    gguf: object  # mobius/gguf_source's GgufSource, or None
    raw: dict
    stated: dict  # config.json as the checkpoint states it (raw less the task's extras)
    generation: dict
    family: object  # ModelFamily
    config: ArchitectureConfig
    checkpoint: object
    quant: QuantSpec | None  # the request's, or a prequantized checkpoint's own


def _open_source(request: BuildRequest, target) -> _Source:
    """Reads the checkpoint's config and checks it against the request and the weights'
    names and shapes, before any graph or table is built."""
    folder = resolve_checkpoint(request.model)
    gguf = open_gguf(folder)
    raw, generation = (gguf.raw, gguf.generation) if gguf else load_config(folder)
    family = family_for(raw)
    check_supported(target.caps, target.dtype, family.task, family.name)
    stated = raw
    if family.task.read_extras is not None:
        raw = {**raw, **family.task.read_extras(folder)}
    request.runtime.check(family.task)
    config = family.make_config(raw, generation)  # config errors before any weight is opened
    config.check_token_ids(family.task.token_ids)
    quant = target.quant
    checkpoint = gguf.checkpoint(quant) if gguf else open_checkpoint(folder, raw)
    if family.checkpoint_view is not None and not gguf:
        checkpoint = family.checkpoint_view(config, checkpoint)
    if request.quant.calibration is not None and quant is not None:
        quant = dataclasses.replace(quant, calibration=load_calibration(
            request.quant.calibration, folder, config.max_position_embeddings,
            request.progress, request.quant.calibration_passes))
    if quant is None and isinstance(checkpoint, PrequantizedCheckpoint):
        quant = prequantized_spec(target.caps, checkpoint.format, request.quant.accuracy_level)
        check_layout(request.runtime.layout, quant=f"int{quant.bits}")
    check_config_fits_checkpoint(
        {k: v for k, v in raw.items() if k not in family.unread_config}, checkpoint)
    return _Source(folder, gguf, raw, stated, generation, family, config, checkpoint, quant)


def _package_files(package: ModelPackage, source: _Source, request: BuildRequest, target,
                   context_length: int) -> None:
    """The package's files beside its graphs (tokenizer, configs) and what it records of
    the build (source folder, layout, dtype, quantization)."""
    runtime, task = request.runtime, source.family.task
    if runtime.sliding_window_cache and runtime.layout == GENAI and (
            target.caps.gqa_sliding_window_cache and package.genai_config is not None
            and task.kv_cache_sized_by_context):
        apply_sliding_window_cache(package.model, package.genai_config, source.config,
                                   context_length)
    package.files_to_copy = [] if source.gguf else find_tokenizer_files(source.folder)
    package.model_files = [] if source.gguf else model_folder_files(
        source.folder, task.sentence_transformers)
    if source.gguf:
        package.extra_json.update(source.gguf.tokenizer_files(context_length))
    package.source = source.folder
    package.layout, package.build_dtype = runtime.layout, SHORT_NAMES[target.dtype]
    # what the package holds (file names, layout checks): a prequantized checkpoint's bits
    package.quant = request.quant.quant or (f"int{source.quant.bits}" if source.quant else None)
    package.hf_configs = {"config.json": source.stated,
                          "generation_config.json": source.generation}
    has_tokenizer = package.files_to_copy or "tokenizer.json" in package.extra_json
    if not has_tokenizer and "input_ids" in task.reference.inputs:
        logger.warning("%s has no tokenizer files; the package will have none", source.folder)


def _open_adapters(checkpoint, adapters: AdapterOptions, layout: str, caps: EpCapabilities):
    """(checkpoint, separate adapters): the merged-adapter view of the checkpoint,
    or the base checkpoint and the adapters its package will carry as files."""
    paths, mode = adapters.paths, adapters.mode
    if not paths:
        return checkpoint, []
    if isinstance(checkpoint, PrequantizedCheckpoint):
        raise MobiusError("--adapter: LoRA adapters are not supported on the packed "
                          "integers of a GPTQ / AWQ checkpoint")
    if mode == MERGED:
        if len(paths) != 1:
            raise MobiusError(f"--adapter: {len(paths)} adapters cannot all be merged into one "
                              f"package; use --adapter-mode separate")
        return LoraMergedCheckpoint(checkpoint, paths[0]), []
    if layout != GENAI:
        raise MobiusError("--adapter-mode separate writes adapters for onnxruntime-genai; "
                          "use the genai layout (or merge the adapter)")
    if caps.use_concrete_dims:
        raise MobiusError(f"--adapter-mode separate: EP {caps.name!r} builds concrete shapes and "
                          f"the LoRA rank is a run-time dimension; merge the adapter instead")
    named = [item.split("=", 1) if "=" in item and not os.path.exists(item) else (None, item)
             for item in paths]
    return checkpoint, [LoraAdapter(path, checkpoint, name) for name, path in named]


def _override_targets(module, config) -> list[str]:
    """Weight names a --quant-override may name: the parameters, and ``lm_head`` where the
    head reads the tied embedding (the quantize pass names that head lm_head)."""
    names = [name for name, _ in module.named_parameters()]
    if getattr(config, "tie_word_embeddings", False):
        names.append("lm_head.weight")
    return names


def _carry_adapters(package: ModelPackage, adapters: list[LoraAdapter]) -> None:
    """Hands separate adapters to the package, in the dtype of its LoRA inputs."""
    if adapters:
        package.adapters, package.adapter_targets = adapters, union_targets(adapters)
        package.adapter_dtype = next(v.type.dtype.numpy() for v in package.model.graph.inputs
                                     if v.name.endswith(".lora_A"))


def _client_options(package: ModelPackage, task: Task, caps: EpCapabilities,
                    runtime: RuntimeOptions, context_length: int) -> None:
    """The runtime options of the package's client: genai's KV size, which logits rows
    the decoder computes (num_logits_to_keep, or the last position only)."""
    layout, logits_to_keep, prefill_logits = (runtime.layout, runtime.logits_to_keep,
                                              runtime.prefill_logits)
    if package.genai_config is not None and task.kv_cache_sized_by_context:
        apply_context_length(package.genai_config, context_length)
    if not task.takes_logits_to_keep:
        return
    if logits_to_keep is None:
        logits_to_keep = layout == TRANSFORMERS_JS and prefill_logits is None
    if prefill_logits is None:
        prefill_logits = LAST if layout == GENAI and not (logits_to_keep or runtime.mtp) else ALL
    if logits_to_keep:
        if layout == GENAI:
            logger.warning("num_logits_to_keep: onnxruntime-genai 0.18 cannot run this package "
                           "(it binds [batch, sequence, vocab] logits); plain onnxruntime can")
        add_logits_to_keep(package.model, ir.DataType.INT64 if caps.supports_int64
                           else ir.DataType.INT32)
    elif prefill_logits == LAST:
        keep_last_logits(package.model)


def build_from_module(
    module: nn.Module,
    config: ArchitectureConfig,
    *,
    task: str | Task = "text-generation",
    execution_provider: str | EpCapabilities = "default",
    dtype: str | ir.DataType = "f32",
    trace_optimization: bool = False,
    quant: QuantSpec | None = None,
    lora_targets: dict[str, tuple[int, int]] | None = None,
) -> ModelPackage:
    """Builds and optimizes the graphs of an already-constructed module.

    Weights are whatever the module's parameters hold (``attach_weights`` sets
    them lazily from a checkpoint); ``quant`` quantizes every Linear.
    ``task``: a Task or a registered task name. ``lora_targets`` (checkpoint
    weight -> (in, out)) become LoRA inputs of the decoder (mobius/tasks/lora_inputs.py).
    """
    task = get_task(task)
    caps = get_ep(execution_provider)
    build_dtype = parse_dtype(dtype)
    check_supported(caps, build_dtype, task)
    models = _task_graphs(module, config, task, caps, build_dtype)
    return _optimized_package(models, module, config, task, caps, build_dtype,
                              trace_optimization, quant, lora_targets)


def _task_graphs(module: nn.Module, config: ArchitectureConfig, task: Task,
                 caps: EpCapabilities, build_dtype: ir.DataType,
                 cross_kv_in_decoder: bool = False) -> dict[str, ir.Model]:
    """The task's generic graphs of ``module``, checked against its I/O contract;
    ``cross_kv_in_decoder``: the client's encoder-decoder split, where the task has it."""
    split = cross_kv_in_decoder and task.cross_kv_in_decoder_io is not None
    flags = TaskFlags(use_concrete_dims=caps.use_concrete_dims, cross_kv_in_decoder=split)
    contract = task.cross_kv_in_decoder_io if split else task.io
    with build_context(caps, build_dtype):
        models = dict(task.build(module, config, flags))
        problems = check_io(task, contract(module, config), models, build_dtype)
    if problems:  # a bug in the task's builder, never in the checkpoint
        raise AssertionError(f"{task} graphs break their I/O contract: {problems[:3]}")
    return models


def _optimized_package(models: dict[str, ir.Model], module: nn.Module,
                       config: ArchitectureConfig, task: Task, caps: EpCapabilities,
                       build_dtype: ir.DataType, trace_optimization: bool,
                       quant: QuantSpec | None,
                       lora_targets: dict[str, tuple[int, int]] | None,
                       cleaned: dict[str, list] | None = None) -> ModelPackage:
    """The generic graphs optimized for the EP, and the package configs around them;
    ``cleaned``: the graphs' cleanup records where a shared construction ran it."""
    with build_context(caps, build_dtype):
        decoder = next((key for key, role in task.roles.items() if role == DECODER), None)
        if lora_targets:
            add_lora_inputs(models[decoder], lora_targets)
        reports = {}
        for key, model in models.items():
            if task.metadata is not None:
                model.metadata_props.update(task.metadata(config))
            reports[key] = optimize_model(model, caps, build_dtype, task.roles[key],
                                          trace=trace_optimization, quant=quant,
                                          cleaned=cleaned[key] if cleaned and not trace_optimization
                                          else None)
            if caps.use_concrete_dims:  # the rules added values after the task: re-establish
                apply_concrete_dims(model, task.named_dims)
        if lora_targets:
            add_lora_defaults(models[decoder])
    processor = dict(task.processor_files(module, config)) if task.processor_files else {}
    if task.package_configs is None:  # a package for plain onnxruntime
        return ModelPackage(models=models, config=config, extra_json=processor, task=task.name)
    uses_gqa = reports[decoder].histogram.get("com.microsoft::GroupQueryAttention", 0) > 0
    genai = GenaiContext(genai_provider_options(caps, past_present_share_buffer=uses_gqa,
                                                  dtype=build_dtype, quantized=quant is not None),
                         past_present_share_buffer=uses_gqa)
    configs = task.package_configs(module, config, genai)
    return ModelPackage(models=models, genai_config=configs.genai_config, config=config,
                        task=task.name,
                        extra_json=dict(configs.extra_json))
