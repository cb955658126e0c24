"""Image-text-to-text (LLaVA-style VLMs): three models, the layout of
onnxruntime-genai's multi-modal pipeline (vision -> embedding -> decoder).

``vision`` (optimizer role vision)
    pixel_values [num_images, channels, height, width] (build dtype), or the
    module's own ``vision_inputs`` (Qwen2.5-VL: flattened patches + image_grid_thw)
    -> image_features [num_image_tokens, hidden]  (all images' tokens, in order)
``embedding`` (optimizer role embedding)
    input_ids int64 [batch_size, sequence_length], image_features [num_image_tokens, hidden]
    -> inputs_embeds [batch_size, sequence_length, hidden]
    (decode steps pass zero image features: [0, hidden])
``model`` (optimizer role decoder: the only one GQA fusion touches)
    the causal-LM contract (mobius/tasks/causal_lm.py) with ``inputs_embeds``
    [batch_size, sequence_length, hidden] in place of input_ids; position_ids
    [3, batch_size, sequence_length] where the language model reads M-RoPE
    streams (``position_streams`` 3).

``hidden`` is the decoder's hidden size: the projector maps image features
into the text embedding space. A language model may declare a wider
``inputs_embeds_width`` (Qwen3-VL: its deepstack features ride beside the
embeddings); genai_config's decoder ``hidden_size`` is then that width, since
genai sizes both image_features and inputs_embeds by it. image_features is rank 2 because genai
allocates it as [num_image_tokens, hidden] (the count its processor reports)
and hands the same buffer from the vision to the embedding session.

The module protocol (mobius/models/llava.py implements it):

* ``image_input_shape``: (channels, height, width) the vision tower takes, or
  ``vision_inputs``: the vision model's input specs, in ``encode_images`` order;
* ``encode_images(op, *vision inputs)`` -> image_features;
* ``embed(op, input_ids, image_features)`` -> inputs_embeds;
* ``language_model``: a causal LM module accepting ``inputs_embeds``;
* ``image_token_id``: the placeholder token (genai_config ``model.image_token_id``);
* ``decoder_token_ids`` (optional, default False): the decoder also takes
  ``input_ids`` (Gemma 3: image tokens attend to each other both ways), which
  onnxruntime-genai feeds a decoder that declares it;
* optional ``speech_inputs`` + ``encode_audio(op, *speech inputs)`` -> audio_features
  [num_audio_tokens, hidden]: a ``speech`` model (optimizer role encoder), whose
  features ``embed(op, input_ids, image_features, audio_features)`` also takes;
* optional ``genai_model_config(preprocessor)``: further keys of genai_config's ``model``
  section (a ``vision`` mapping is merged into the vision section);
* optional ``genai_processor_files(preprocessor)``: {file name: JSON} of genai's
  image (or speech) processor, written beside the models (the first one is the vision
  section's ``config_filename`` unless genai_model_config names it or it is the speech
  section's). ``preprocessor`` (both hooks) is the checkpoint's parsed
  preprocessor_config.json ({} where it has none), whose settings the family carries
  or refuses (mobius/tasks/genai_image_settings.py).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.package.genai_config import vision_language_genai_config
from mobius.roles import DECODER, EMBEDDING, ENCODER, VISION
from mobius.tasks.causal_lm import (BATCH, NAMED_DIMS, SEQ, add_conv_states, build_causal_lm,
                                    decoder_io, embeds_width, position_streams,
                                    recurrent_states)
from mobius.tasks.concrete_dims import check_io_dims
from mobius.tasks.image_processor import RAW_KEY, read_extras
from mobius.tasks.task import (GenaiContext, ModelIO, PackageConfigs, Reference, Task, TaskFlags,
                               TensorSpec, add_inputs, add_outputs, new_graph)

NUM_IMAGES, NUM_IMAGE_TOKENS = "num_images", "num_image_tokens"
#: flattened image patches (Qwen2.5-VL's pixel_values rows)
NUM_PATCHES = "num_patches"
#: an image's sides in pixels, where the vision model takes any size (Mistral 3's Pixtral)
IMAGE_HEIGHT, IMAGE_WIDTH = "image_height", "image_width"
#: HD crops per image (Phi-4-multimodal's pixel_values / image_attention_mask)
NUM_CROPS = "num_crops"
#: audios, their mel frames and tokens (the optional speech model)
NUM_AUDIOS, NUM_FRAMES, NUM_AUDIO_TOKENS = "num_audios", "num_frames", "num_audio_tokens"
IMAGE_DIMS = (NUM_IMAGES, NUM_IMAGE_TOKENS, NUM_PATCHES, IMAGE_HEIGHT, IMAGE_WIDTH, NUM_CROPS,
              NUM_AUDIOS, NUM_FRAMES, NUM_AUDIO_TOKENS)
#: every symbolic dim of the three models' graph I/O (TaskFlags.use_concrete_dims)
VISION_LANGUAGE_DIMS = (*NAMED_DIMS, *IMAGE_DIMS)


def vision_inputs(module: nn.Module) -> tuple[TensorSpec, ...]:
    """The vision model's inputs: the module's ``vision_inputs``, else pixel_values."""
    specs = getattr(module, "vision_inputs", None)
    if specs is not None:
        return tuple(specs)
    return (TensorSpec("pixel_values", None, (NUM_IMAGES, *module.image_input_shape)),)


def speech_inputs(module: nn.Module) -> tuple[TensorSpec, ...] | None:
    """The speech model's inputs (``speech_inputs``), or None: no speech model."""
    specs = getattr(module, "speech_inputs", None)
    return None if specs is None else tuple(specs)


def vision_language_io(module: nn.Module, config: ArchitectureConfig) -> dict[str, ModelIO]:
    width = embeds_width(module.language_model, config)
    features = TensorSpec("image_features", None, (NUM_IMAGE_TOKENS, width))
    embedding_inputs = (TensorSpec("input_ids", ir.DataType.INT64, (BATCH, SEQ)), features)
    io = {"vision": ModelIO(inputs=vision_inputs(module), outputs=(features,))}
    speech = speech_inputs(module)
    if speech is not None:
        audio = TensorSpec("audio_features", None, (NUM_AUDIO_TOKENS, config.hidden_size))
        io["speech"] = ModelIO(inputs=speech, outputs=(audio,))
        embedding_inputs += (audio,)
    io["embedding"] = ModelIO(
        inputs=embedding_inputs,
        outputs=(TensorSpec("inputs_embeds", None, (BATCH, SEQ, width)),))
    io["model"] = decoder_io(config, inputs_embeds=True, token_ids=_token_ids(module),
                             recurrent=recurrent_states(module.language_model),
                             streams=position_streams(module.language_model), width=width)
    return io


def _token_ids(module: nn.Module) -> bool:
    return bool(getattr(module, "decoder_token_ids", False))


def build_vision_language(module: nn.Module, config: ArchitectureConfig,
                          flags: TaskFlags = TaskFlags()) -> dict[str, ir.Model]:
    """Package key (model.onnx / <key>.onnx) -> graph; the builder optimizes each
    with its role (vision, embedding, decoder)."""
    io = vision_language_io(module, config)
    models = {"vision": build_vision(module, io["vision"], flags)}
    if "speech" in io:
        models["speech"] = build_speech(module, io["speech"], flags)
    models["embedding"] = build_embedding(module, io["embedding"], flags)
    models["model"] = build_causal_lm(module.language_model, config,
                                      dataclasses.replace(flags, inputs_embeds=True),
                                      token_ids=_token_ids(module))
    return models


def _model(graph: ir.Graph, flags: TaskFlags) -> ir.Model:
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, VISION_LANGUAGE_DIMS)
    return model


def build_vision(module: nn.Module, io: ModelIO, flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    features = module.encode_images(builder.op, *(inputs[spec.name] for spec in io.inputs))
    add_outputs(builder, {"image_features": features}, io.outputs, dtype)
    return _model(graph, flags)


def build_speech(module: nn.Module, io: ModelIO, flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    features = module.encode_audio(builder.op, *(inputs[spec.name] for spec in io.inputs))
    add_outputs(builder, {"audio_features": features}, io.outputs, dtype)
    return _model(graph, flags)


def build_embedding(module: nn.Module, io: ModelIO, flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    audio = (inputs["audio_features"],) if "audio_features" in inputs else ()
    embeds = module.embed(builder.op, inputs["input_ids"], inputs["image_features"], *audio)
    add_outputs(builder, {"inputs_embeds": embeds}, io.outputs, dtype)
    return _model(graph, flags)


def _genai_configs(module: nn.Module, config: ArchitectureConfig,
                   genai: GenaiContext) -> PackageConfigs:
    extra = getattr(module, "genai_model_config", None)
    processor = getattr(module, "genai_processor_files", None)
    preprocessor = config.raw.get(RAW_KEY) or {}  # the checkpoint's preprocessor_config.json
    files = dict(processor(preprocessor)) if processor is not None else {}
    genai_config = vision_language_genai_config(
        config, image_token_id=module.image_token_id, provider_options=genai.provider_options,
        past_present_share_buffer=genai.past_present_share_buffer,
        decoder_token_ids=_token_ids(module),
        vision_inputs=tuple(spec.name for spec in vision_inputs(module)),
        extra=extra(preprocessor) if extra is not None else None,
        embeds_width=embeds_width(module.language_model, config))
    convs = {i: dims for i, layer in recurrent_states(module.language_model).items()
             for name, dims in layer if name == "conv"}
    if convs:  # a hybrid decoder (LFM2-VL): its conv states, as for text generation
        add_conv_states(genai_config, config, convs)
    first = next(iter(files), None)
    if first is not None and first != genai_config["model"].get("speech", {}).get(
            "config_filename"):  # genai's image processor reads model.vision.config_filename
        genai_config["model"]["vision"].setdefault("config_filename", first)
    return PackageConfigs(genai_config, extra_json=files)


TASK = Task(
    name="image-text-to-text",
    summary="vision tower + embedder + causal LM (onnxruntime-genai)",
    build=build_vision_language,
    roles={"vision": VISION, "speech": ENCODER, "embedding": EMBEDDING, "model": DECODER},
    io=vision_language_io,
    named_dims=VISION_LANGUAGE_DIMS,
    reference=Reference(auto_class="AutoModelForImageTextToText", runner="vision_language",
                        inputs=("input_ids", "attention_mask", "pixel_values"),
                        outputs=("logits",)),
    package_configs=_genai_configs,
    token_ids=("bos_token_id", "eos_token_id", "pad_token_id"),  # genai_config.json
    read_extras=read_extras,
    kv_cache_sized_by_context=True,
)
