"""The public build entry points: checkpoint or module -> ModelPackage."""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig, load_config
from mobius.context import build_context
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.models.registry import family_for
from mobius.optimize.pipeline import optimize_model
from mobius.package.genai_config import decoder_genai_config
from mobius.package.model_package import ModelPackage
from mobius.package.tokenizer_files import find_tokenizer_files
from mobius.source import resolve_checkpoint
from mobius.tasks.causal_lm import TaskFlags, build_causal_lm
from mobius.weights.attach import attach_weights
from mobius.weights.dtypes import parse_dtype
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

logger = logging.getLogger(__name__)

TASKS = ("text-generation",)


def build(
    model: str,
    *,
    execution_provider: str | EpCapabilities = "default",
    dtype: str | ir.DataType = "f32",
    trace_optimization: bool = False,
    progress: bool = False,
) -> ModelPackage:
    """Builds an ONNX package from a hub id, a local HF folder or a built-in tiny name.

    The EP and dtype are validated before anything is downloaded or read.
    """
    caps = get_ep(execution_provider)
    build_dtype = parse_dtype(dtype)
    folder = resolve_checkpoint(model)
    raw, generation = load_config(folder)
    family = family_for(raw)
    config = family.make_config(raw, generation)
    checkpoint = SafetensorsCheckpoint(folder)
    with build_context(caps, build_dtype):
        module = family.module(config)
    attach_weights(module, checkpoint)
    package = build_from_module(module, config, task=family.task, execution_provider=caps,
                                dtype=build_dtype, trace_optimization=trace_optimization)
    package.files_to_copy = find_tokenizer_files(folder)
    if not package.files_to_copy:
        logger.warning("%s has no tokenizer files; the package will have none", folder)
    return package


def build_from_module(
    module: nn.Module,
    config: ArchitectureConfig,
    *,
    task: str = "text-generation",
    execution_provider: str | EpCapabilities = "default",
    dtype: str | ir.DataType = "f32",
    trace_optimization: bool = False,
) -> ModelPackage:
    """Builds and optimizes the graph of an already-constructed module.

    Weights are whatever the module's parameters hold (``attach_weights`` sets
    them lazily from a checkpoint).
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; supported: {', '.join(TASKS)}")
    caps = get_ep(execution_provider)
    build_dtype = parse_dtype(dtype)
    flags = TaskFlags(use_concrete_dims=caps.use_concrete_dims, int32_inputs=not caps.supports_int64)
    with build_context(caps, build_dtype):
        model = build_causal_lm(module, config, flags)
        report = optimize_model(model, caps, build_dtype, "decoder", trace=trace_optimization)
    uses_gqa = report.histogram.get("com.microsoft::GroupQueryAttention", 0) > 0
    genai = decoder_genai_config(
        config,
        provider_options=[{name: dict(opts)} for name, opts in caps.provider_options.items()],
        past_present_share_buffer=uses_gqa,
    )
    return ModelPackage(models={"model": model}, genai_config=genai, config=config)
