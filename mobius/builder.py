"""The public build entry points: checkpoint or module -> ModelPackage."""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig, load_config
from mobius.context import build_context
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.errors import MobiusError
from mobius.models.registry import family_for
from mobius.optimize.pipeline import optimize_model
from mobius.package.context_length import apply_context_length, resolve_context_length
from mobius.package.genai_config import (decoder_genai_config, vision_language_genai_config,
                                         whisper_audio_processor_config, whisper_genai_config)
from mobius.package.model_package import ModelPackage
from mobius.package.provider_options import genai_provider_options
from mobius.package.tokenizer_files import find_tokenizer_files
from mobius.package.transformers_js import (GENAI, TRANSFORMERS_JS, check_layout,
                                            client_capabilities)
from mobius.source import resolve_checkpoint
from mobius.rewrite.rule import DECODER, EMBEDDING, ENCODER, VISION
from mobius.tasks.causal_lm import NAMED_DIMS, TaskFlags, build_causal_lm
from mobius.tasks.concrete_dims import apply_concrete_dims
from mobius.tasks.encoder import build_encoder
from mobius.tasks.logits_to_keep import add_logits_to_keep
from mobius.tasks.speech_seq2seq import build_speech_seq2seq
from mobius.tasks.vision_language import IMAGE_DIMS, build_vision_language
from mobius.weights.attach import attach_weights
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype
from mobius.weights.lora import LoraMergedCheckpoint
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

logger = logging.getLogger(__name__)

#: task -> (graph builder, model role for the optimizer). A multi-model task's
#: builder returns {package key: model} and its entry maps each key to a role.
TASKS = {
    "text-generation": (build_causal_lm, DECODER),
    "feature-extraction": (build_encoder, ENCODER),
    "image-text-to-text": (build_vision_language,
                           {"vision": VISION, "embedding": EMBEDDING, "model": DECODER}),
    "automatic-speech-recognition": (build_speech_seq2seq,
                                     {"encoder": ENCODER, "decoder": DECODER}),
}
#: tasks onnxruntime-genai generates with (the others get no genai_config.json)
GENERATIVE_TASKS = ("text-generation", "image-text-to-text", "automatic-speech-recognition")
#: tasks whose genai KV cache is sized by the context length (Whisper's by its decoder positions)
CONTEXT_TASKS = ("text-generation", "image-text-to-text")


def build(
    model: str,
    *,
    execution_provider: str | EpCapabilities = "default",
    dtype: str | ir.DataType = "f32",
    trace_optimization: bool = False,
    progress: bool = False,
    layout: str = GENAI,
    logits_to_keep: bool | None = None,
    context_length: int | None = None,
    adapter: str | None = None,
) -> ModelPackage:
    """Builds an ONNX package from a hub id, a local HF folder or a built-in tiny name.

    The EP, dtype and layout ("genai" or "transformers.js", the folder's
    client) are validated before anything is downloaded or read.
    ``logits_to_keep`` adds the decoder input ``num_logits_to_keep``
    (mobius/tasks/logits_to_keep.py); default: where the layout's client
    feeds it (transformers.js), not for onnxruntime-genai 0.18.
    ``context_length``: genai_config's context length and KV size
    (mobius/package/context_length.py; default min(max positions, 4096)).
    ``adapter``: a PEFT LoRA adapter folder merged into the weights
    (mobius/weights/lora.py).
    """
    caps = get_ep(execution_provider)
    build_dtype = parse_dtype(dtype)
    check_supported(caps, build_dtype)
    check_layout(layout, SHORT_NAMES[build_dtype])
    caps = client_capabilities(caps, layout)
    folder = resolve_checkpoint(model)
    raw, generation = load_config(folder)
    family = family_for(raw)
    check_supported(caps, build_dtype, family.task, family.name)
    check_layout(layout, task=family.task)
    config = family.make_config(raw, generation)
    context_length = resolve_context_length(context_length, config.max_position_embeddings)
    checkpoint = SafetensorsCheckpoint(folder)
    if adapter is not None:
        checkpoint = LoraMergedCheckpoint(checkpoint, adapter)
    with build_context(caps, build_dtype):
        module = family.module(config)
    attach_weights(module, checkpoint, family.checkpoint_prefixes, family.checkpoint_aliases)
    package = build_from_module(module, config, task=family.task, execution_provider=caps,
                                dtype=build_dtype, trace_optimization=trace_optimization)
    _client_options(package, family.task, caps, layout, logits_to_keep, context_length)
    package.files_to_copy = find_tokenizer_files(folder)
    package.layout, package.build_dtype = layout, SHORT_NAMES[build_dtype]
    package.hf_configs = {"config.json": raw, "generation_config.json": generation}
    if not package.files_to_copy:
        logger.warning("%s has no tokenizer files; the package will have none", folder)
    return package


def _client_options(package: ModelPackage, task: str, caps: EpCapabilities, layout: str,
                    logits_to_keep: bool | None, context_length: int) -> None:
    """The runtime options of the package's client: genai's KV size, num_logits_to_keep."""
    if package.genai_config is not None and task in CONTEXT_TASKS:
        apply_context_length(package.genai_config, context_length)
    if logits_to_keep is None:
        logits_to_keep = layout == TRANSFORMERS_JS
    if logits_to_keep and task == "text-generation":
        if layout == GENAI:
            logger.warning("num_logits_to_keep: onnxruntime-genai 0.18 cannot run this package "
                           "(it binds [batch, sequence, vocab] logits); plain onnxruntime can")
        add_logits_to_keep(package.model, ir.DataType.INT64 if caps.supports_int64
                           else ir.DataType.INT32)


def check_supported(caps: EpCapabilities, dtype: ir.DataType, task: str | None = None,
                    family: str | None = None) -> None:
    """Rejects (EP, dtype) and (EP, task) pairs the EP cannot run, before any work."""
    if dtype not in caps.dtypes:
        names = ", ".join(sorted(SHORT_NAMES[d] for d in caps.dtypes))
        raise MobiusError(f"EP {caps.name!r} does not support {SHORT_NAMES[dtype]}; "
                          f"build with --dtype {names.replace(', ', ' or ')}")
    if task is not None and caps.tasks is not None and task not in caps.tasks:
        what = f"{family} is a {task!r} model" if family else f"this is a {task!r} model"
        raise MobiusError(f"EP {caps.name!r} only runs {', '.join(sorted(caps.tasks))} models "
                          f"and {what}; use --ep default or cpu")


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
    check_supported(caps, build_dtype, task)
    flags = TaskFlags(use_concrete_dims=caps.use_concrete_dims)
    build_graph, roles = TASKS[task]
    with build_context(caps, build_dtype):
        built = build_graph(module, config, flags)
        models = built if isinstance(built, dict) else {"model": built}
        roles = roles if isinstance(roles, dict) else {"model": roles}
        reports = {}
        for key, model in models.items():
            reports[key] = optimize_model(model, caps, build_dtype, roles[key],
                                          trace=trace_optimization)
            if flags.use_concrete_dims:  # the rules added values after the task: re-establish
                apply_concrete_dims(model, (*NAMED_DIMS, *IMAGE_DIMS))
    if task not in GENERATIVE_TASKS:  # onnxruntime-genai runs generative models only
        return ModelPackage(models=models, config=config)
    decoder = next(key for key, role in roles.items() if role == DECODER)
    uses_gqa = reports[decoder].histogram.get("com.microsoft::GroupQueryAttention", 0) > 0
    options = dict(
        provider_options=genai_provider_options(caps, past_present_share_buffer=uses_gqa),
        past_present_share_buffer=uses_gqa,
    )
    if task == "image-text-to-text":
        genai = vision_language_genai_config(config, image_token_id=module.image_token_id,
                                             **options)
    elif task == "automatic-speech-recognition":
        genai = whisper_genai_config(config, module.encoder_config, **options)
        audio = whisper_audio_processor_config(module.encoder_config.num_mel_bins)
        return ModelPackage(models=models, genai_config=genai, config=config,
                            extra_json={"audio_processor_config.json": audio})
    else:
        genai = decoder_genai_config(config, **options)
    return ModelPackage(models=models, genai_config=genai, config=config)
