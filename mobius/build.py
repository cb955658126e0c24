"""The public build entry points: checkpoint or module -> ModelPackage."""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig, load_config
from mobius.context import build_context
from mobius.models.registry import family_for
from mobius.package.genai_config import decoder_genai_config
from mobius.package.model_package import ModelPackage
from mobius.package.tokenizer_files import find_tokenizer_files
from mobius.source import resolve_checkpoint
from mobius.tasks.causal_lm import build_causal_lm
from mobius.weights.attach import attach_weights
from mobius.weights.dtypes import parse_dtype
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

logger = logging.getLogger(__name__)

TASKS = ("text-generation",)


def build(
    model: str,
    *,
    dtype: str | ir.DataType = "f32",
    progress: bool = False,
) -> ModelPackage:
    """Builds an ONNX package from a hub id, a local HF folder or a built-in tiny name."""
    build_dtype = parse_dtype(dtype)
    folder = resolve_checkpoint(model)
    raw, generation = load_config(folder)
    family = family_for(raw)
    config = family.make_config(raw, generation)
    checkpoint = SafetensorsCheckpoint(folder)
    with build_context(None, build_dtype):
        module = family.module(config)
        package = build_from_module(module, config, task=family.task, dtype=build_dtype)
    attach_weights(module, checkpoint)
    package.files_to_copy = find_tokenizer_files(folder)
    if not package.files_to_copy:
        logger.warning("%s has no tokenizer files; the package will have none", folder)
    return package


def build_from_module(
    module: nn.Module,
    config: ArchitectureConfig,
    *,
    task: str = "text-generation",
    dtype: str | ir.DataType = "f32",
) -> ModelPackage:
    """Builds the graph of an already-constructed module (weights attached by the caller)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; supported: {', '.join(TASKS)}")
    build_dtype = parse_dtype(dtype)
    with build_context(None, build_dtype):
        model = build_causal_lm(module, config)
    return ModelPackage(models={"model": model}, genai_config=decoder_genai_config(config),
                        config=config)
