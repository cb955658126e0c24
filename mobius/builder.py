"""The public build entry points: checkpoint or module -> ModelPackage."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence

import onnx_ir as ir
from onnxscript import nn

from mobius.build_args import check_build_args
from mobius.config.architecture import ArchitectureConfig, load_config
from mobius.context import build_context
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.errors import MobiusError
from mobius.gguf_source import open_gguf
from mobius.models.registry import family_for
from mobius.optimize.pipeline import optimize_model
from mobius.package.context_length import apply_context_length, resolve_context_length
from mobius.package.model_package import ModelPackage
from mobius.package.provider_options import genai_provider_options
from mobius.package.sliding_window import apply_sliding_window_cache
from mobius.package.tokenizer_files import find_tokenizer_files
from mobius.package.transformers_js import (GENAI, TRANSFORMERS_JS, check_layout,
                                            client_capabilities)
from mobius.quantize.calibration import load_calibration
from mobius.quantize.prequantized import prequantized_spec
from mobius.quantize.spec import QuantSpec, check_overrides_match, resolve_quant
from mobius.roles import DECODER
from mobius.source import resolve_checkpoint
from mobius.tasks.concrete_dims import apply_concrete_dims
from mobius.tasks.logits_to_keep import (ALL, LAST, PREFILL_LOGITS, add_logits_to_keep,
                                          keep_last_logits)
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

MERGED, SEPARATE = "merged", "separate"
ADAPTER_MODES = (MERGED, SEPARATE)

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
    layout: str = GENAI,
    logits_to_keep: bool | None = None,
    prefill_logits: str | None = None,
    context_length: int | None = None,
    adapter: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    adapter_mode: str = MERGED,
    sliding_window_cache: bool = False,
) -> ModelPackage:
    """Builds an ONNX package from a hub id, a local HF folder, a GGUF file (or a folder
    holding one: mobius/gguf_source.py) or a built-in tiny name.

    ``quant`` ("int4" / "int8") quantizes every Linear's weights (``dtype`` is
    then the activations'); the ``quant_*`` options default per EP
    (EpCapabilities). The EP, dtype and quantization are validated before
    anything is downloaded or read. ``quant_calibration``: a UTF-8 text file;
    the float model's activations on it fit the quantized weights (GPTQ,
    mobius/quantize/gptq.py), instead of rounding each weight alone.

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
    """
    check_build_args(dict(locals()))  # every argument, by name, before anything else
    check_prefill_logits(prefill_logits, logits_to_keep)
    caps, build_dtype, quant_spec = check_request(
        execution_provider, dtype, layout, quant, block_size=quant_block_size,
        symmetric=quant_symmetric, accuracy_level=quant_accuracy_level, lm_head=quant_lm_head,
        embedding=quant_embedding, overrides=quant_override, method=quant_method,
        calibration=None if quant_calibration is None else os.fspath(quant_calibration))
    folder = resolve_checkpoint(os.fspath(model))
    gguf = open_gguf(folder)
    raw, generation = (gguf.raw, gguf.generation) if gguf else load_config(folder)
    family = family_for(raw)
    check_supported(caps, build_dtype, family.task, family.name)
    if family.task.read_extras is not None:
        raw = {**raw, **family.task.read_extras(folder)}
    check_layout(layout, task=family.task.name)
    check_prefill_logits(prefill_logits, logits_to_keep, family.task)
    config = family.make_config(raw, generation)  # config errors before any weight is opened
    config.check_token_ids(family.task.token_ids)
    checkpoint = gguf.checkpoint(quant_spec) if gguf else open_checkpoint(folder, raw)
    if quant_calibration is not None and quant_spec is not None:
        quant_spec = dataclasses.replace(quant_spec, calibration=load_calibration(
            os.fspath(quant_calibration), folder, config.max_position_embeddings, progress))
    if quant_spec is None and isinstance(checkpoint, PrequantizedCheckpoint):
        quant_spec = prequantized_spec(caps, checkpoint.format, quant_accuracy_level)
        quant = f"int{quant_spec.bits}"  # what the package holds (file names, layout checks)
        check_layout(layout, quant=quant)
    check_config_fits_checkpoint(  # before any graph or table is built
        {k: v for k, v in raw.items() if k not in family.unread_config}, checkpoint)
    context_length = resolve_context_length(context_length, config.max_position_embeddings)
    checkpoint, adapters = _open_adapters(checkpoint, adapter, adapter_mode, layout, caps)
    with build_context(caps, build_dtype):
        module = family.module(config)
    check_overrides_match(quant_spec, _override_targets(module, config))
    attach_weights(module, checkpoint, family.checkpoint_prefixes, family.checkpoint_aliases,
                   family.ignored_tensors(config))
    package = build_from_module(module, config, task=family.task, execution_provider=caps,
                                dtype=build_dtype, trace_optimization=trace_optimization,
                                quant=quant_spec, lora_targets=union_targets(adapters))
    _carry_adapters(package, adapters)
    _client_options(package, family.task, caps, layout, logits_to_keep, prefill_logits,
                    context_length)
    if sliding_window_cache and layout == GENAI and caps.gqa_sliding_window_cache and (
            package.genai_config is not None and family.task.kv_cache_sized_by_context):
        apply_sliding_window_cache(package.model, package.genai_config, config, context_length)
    package.files_to_copy = [] if gguf else find_tokenizer_files(folder)
    if gguf:
        package.extra_json.update(gguf.tokenizer_files(context_length))
    package.source = folder
    package.layout, package.build_dtype = layout, SHORT_NAMES[build_dtype]
    package.quant = quant
    package.hf_configs = {"config.json": raw, "generation_config.json": generation}
    has_tokenizer = package.files_to_copy or "tokenizer.json" in package.extra_json
    if not has_tokenizer and "input_ids" in family.task.reference.inputs:
        logger.warning("%s has no tokenizer files; the package will have none", folder)
    return package


def _open_adapters(checkpoint, adapter: str | Sequence[str] | None, mode: str, layout: str,
                   caps: EpCapabilities):
    """(checkpoint, separate adapters): the merged-adapter view of the checkpoint,
    or the base checkpoint and the adapters its package will carry as files."""
    paths = [os.fspath(a) for a in ([adapter] if isinstance(adapter, (str, os.PathLike))
                                    else adapter or ())]
    if mode not in ADAPTER_MODES:
        raise MobiusError(f"adapter mode {mode!r}: use {' or '.join(ADAPTER_MODES)}")
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


def _client_options(package: ModelPackage, task: Task, caps: EpCapabilities, layout: str,
                    logits_to_keep: bool | None, prefill_logits: str | None,
                    context_length: int) -> None:
    """The runtime options of the package's client: genai's KV size, which logits rows
    the decoder computes (num_logits_to_keep, or the last position only)."""
    if package.genai_config is not None and task.kv_cache_sized_by_context:
        apply_context_length(package.genai_config, context_length)
    if not task.takes_logits_to_keep:
        return
    if logits_to_keep is None:
        logits_to_keep = layout == TRANSFORMERS_JS and prefill_logits is None
    if prefill_logits is None:
        prefill_logits = LAST if layout == GENAI and not logits_to_keep else ALL
    if logits_to_keep:
        if layout == GENAI:
            logger.warning("num_logits_to_keep: onnxruntime-genai 0.18 cannot run this package "
                           "(it binds [batch, sequence, vocab] logits); plain onnxruntime can")
        add_logits_to_keep(package.model, ir.DataType.INT64 if caps.supports_int64
                           else ir.DataType.INT32)
    elif prefill_logits == LAST:
        keep_last_logits(package.model)


def check_prefill_logits(prefill_logits: str | None, logits_to_keep: bool | None,
                         task: Task | None = None) -> None:
    """Rejects an unknown ``prefill_logits``, one that contradicts ``logits_to_keep``, or
    "last" for a ``task`` without LM-head logits (once the checkpoint's task is known,
    before any weight is read)."""
    if task is not None and prefill_logits == LAST and not task.takes_logits_to_keep:
        raise MobiusError(f"--prefill-logits last: only a causal LM's logits can be "
                          f"limited, not a {task.name} package's")
    if prefill_logits not in (None, *PREFILL_LOGITS):
        raise MobiusError(f"--prefill-logits: unknown prefill logits {prefill_logits!r}; "
                          f"expected {' or '.join(PREFILL_LOGITS)}")
    if prefill_logits == LAST and logits_to_keep:
        raise MobiusError("--prefill-logits last and --logits-to-keep both choose the logits "
                          "rows: use one (num_logits_to_keep=1 gives the last row)")


def check_request(execution_provider: str | EpCapabilities, dtype: str | ir.DataType,
                  layout: str = GENAI, quant: str | None = None, **quant_options
                  ) -> tuple[EpCapabilities, ir.DataType, QuantSpec | None]:
    """Everything about a build request that needs no checkpoint (EP, dtype, layout,
    quantization), checked before anything is downloaded or read: the EP as the
    layout's client sees it, the build dtype and the QuantSpec (None: float)."""
    caps = get_ep(execution_provider)
    build_dtype = parse_dtype(dtype)
    check_supported(caps, build_dtype)
    quant_spec = resolve_quant(caps, quant, **quant_options)
    check_layout(layout, SHORT_NAMES[build_dtype], quant=quant)
    return client_capabilities(caps, layout), build_dtype, quant_spec


def check_supported(caps: EpCapabilities, dtype: ir.DataType, task: Task | None = None,
                    family: str | None = None) -> None:
    """Rejects (EP, dtype) and (EP, task) pairs the EP cannot run, before any work."""
    if dtype not in caps.dtypes:
        names = ", ".join(sorted(SHORT_NAMES[d] for d in caps.dtypes))
        raise MobiusError(f"EP {caps.name!r} does not support {SHORT_NAMES[dtype]}; "
                          f"build with --dtype {names.replace(', ', ' or ')}")
    if task is not None and caps.tasks is not None and task.name not in caps.tasks:
        what = f"{family} is a {task.name!r} model" if family else f"this is a {task.name!r} model"
        raise MobiusError(f"EP {caps.name!r} only runs {', '.join(sorted(caps.tasks))} models "
                          f"and {what}; use --ep default or cpu")


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
    flags = TaskFlags(use_concrete_dims=caps.use_concrete_dims)
    with build_context(caps, build_dtype):
        models = dict(task.build(module, config, flags))
        problems = check_io(task, task.io(module, config), models, build_dtype)
        if problems:  # a bug in the task's builder, never in the checkpoint
            raise AssertionError(f"{task} graphs break their I/O contract: {problems[:3]}")
        decoder = next((key for key, role in task.roles.items() if role == DECODER), None)
        if lora_targets:
            add_lora_inputs(models[decoder], lora_targets)
        reports = {}
        for key, model in models.items():
            if task.metadata is not None:
                model.metadata_props.update(task.metadata(config))
            reports[key] = optimize_model(model, caps, build_dtype, task.roles[key],
                                          trace=trace_optimization, quant=quant)
            if flags.use_concrete_dims:  # the rules added values after the task: re-establish
                apply_concrete_dims(model, task.named_dims)
        if lora_targets:
            add_lora_defaults(models[decoder])
    processor = dict(task.processor_files(module, config)) if task.processor_files else {}
    if task.package_configs is None:  # a package for plain onnxruntime
        return ModelPackage(models=models, config=config, extra_json=processor)
    uses_gqa = reports[decoder].histogram.get("com.microsoft::GroupQueryAttention", 0) > 0
    genai = GenaiContext(genai_provider_options(caps, past_present_share_buffer=uses_gqa),
                         past_present_share_buffer=uses_gqa)
    configs = task.package_configs(module, config, genai)
    return ModelPackage(models=models, genai_config=configs.genai_config, config=config,
                        extra_json=dict(configs.extra_json))
