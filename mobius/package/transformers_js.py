"""The transformers.js package layout (``mobius build --layout transformers.js``).

transformers.js loads a local model folder the way it loads a hub repository:
``config.json`` (with its ``transformers.js_config`` section),
``generation_config.json``, the tokenizer files, an image model's
``preprocessor_config.json`` (its AutoProcessor), and the ONNX files under
``onnx/``, named ``<model><dtype suffix>.onnx`` with the weights in
``<file>_data`` beside them. It feeds token ids, masks and positions as int64,
so an EP that lowers graph I/O to int32 keeps int64 I/O in this layout.
The suffix is transformers.js's dtype name: ``--quant int4`` writes its "q4"
file (4-bit block weights, f32 activations: ``model_q4.onnx``) or "q4f16"
(``model_q4f16.onnx``); ``--quant int8`` its "q8" (``model_quantized.onnx``:
8-bit block weights in MatMulNBits, which the onnxruntime-node it ships runs;
its own q8 files are dynamically quantized, but it picks the file by name). It
has no 8-bit f16 dtype, so int8 with f16 is refused.

Encoder-decoders (text2text-generation: t5, mt5, bart, marian;
automatic-speech-recognition: whisper) are ``onnx/encoder_model.onnx`` and
``onnx/decoder_model_merged.onnx`` with Optimum's I/O names
(mobius/package/optimum_layout.py): the decoder is the If-merged pair of the
first-step and with-past decoders (mobius/package/merged_decoder.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

from mobius.ep.capabilities import EpCapabilities
from mobius.errors import MobiusError
from mobius.package.hf_folder import write_model_folder
from mobius.package.merged_decoder import merge_decoder_files
from mobius.package.optimum_layout import (OPTIMUM, SEQ2SEQ, check_optimum, optimum_capabilities,
                                           to_optimum_names)

GENAI = "genai"
TRANSFORMERS_JS = "transformers.js"
LAYOUTS = (GENAI, TRANSFORMERS_JS, OPTIMUM)
#: tasks whose transformers.js pipeline loads a single onnx/model*.onnx (its
#: encoder-only and decoder-only model classes; CLIPModel takes text and pixels in one),
#: and the encoder-decoders' (encoder_model + decoder_model_merged)
TASKS = ("text-generation", "feature-extraction", "text-classification", "token-classification",
         "fill-mask", "image-classification", "image-feature-extraction",
         "zero-shot-image-classification", *SEQ2SEQ)
#: build dtype -> transformers.js file-name suffix (its dtype names: fp32, fp16)
DTYPE_SUFFIX = {"f32": ("fp32", ""), "f16": ("fp16", "_fp16")}
#: the same with int4 weights (its q4 / q4f16)
INT4_SUFFIX = {"f32": ("q4", "_q4"), "f16": ("q4f16", "_q4f16")}
#: the same with int8 weights (its q8; it has no 8-bit f16 dtype)
INT8_SUFFIX = {"f32": ("q8", "_quantized")}
#: quantization -> its dtype table
QUANT_SUFFIX = {None: DTYPE_SUFFIX, "int4": INT4_SUFFIX, "int8": INT8_SUFFIX}
SUBFOLDER = "onnx"


def check_layout(layout: str, dtype: str | None = None, task: str | None = None,
                 quant: str | None = None, logits_to_keep: bool | None = None) -> None:
    """Rejects an unknown layout, or a dtype / task / quantization / decoder input the
    layout cannot hold, before any work."""
    if layout not in LAYOUTS:
        raise MobiusError(f"unknown layout {layout!r}; choose one of: {', '.join(LAYOUTS)}")
    if layout == OPTIMUM:
        check_optimum(task, logits_to_keep)
    if layout != TRANSFORMERS_JS:
        return
    if dtype is not None and dtype not in DTYPE_SUFFIX:
        raise MobiusError(f"the transformers.js layout holds {' or '.join(DTYPE_SUFFIX)} "
                          f"models, not {dtype}")
    if quant not in QUANT_SUFFIX:
        raise MobiusError(f"the transformers.js layout holds float, int4 (its q4 / q4f16) or "
                          f"int8 (its q8) models, not {quant}")
    if dtype is not None and dtype not in QUANT_SUFFIX[quant]:
        raise MobiusError(f"the transformers.js layout holds {quant} models of "
                          f"{' or '.join(QUANT_SUFFIX[quant])} activations (transformers.js "
                          f"has no {quant} {dtype} dtype), not {dtype}")
    if task is not None and task not in TASKS:
        raise MobiusError(f"the transformers.js layout holds {' or '.join(TASKS)} models; "
                          f"this is a {task!r} model")


def client_capabilities(caps: EpCapabilities, layout: str) -> EpCapabilities:
    """The EP as the layout's client sees it: transformers.js feeds int64 I/O; Optimum's
    (mobius/package/optimum_layout.py)."""
    if layout == OPTIMUM:
        return optimum_capabilities(caps)
    if layout == TRANSFORMERS_JS and not caps.supports_int64:
        return dataclasses.replace(caps, supports_int64=True)
    return caps


def cross_kv_in_decoder(layout: str) -> bool:
    """Whether the layout's client runs encoder-decoders with the cross K/V projected in
    the first decoder step (mobius/tasks/cross_kv_split.py): Optimum's and transformers.js'."""
    return layout in (OPTIMUM, TRANSFORMERS_JS)


def to_client_files(package, layout: str) -> None:
    """The file and I/O names Optimum and transformers.js load (an encoder-decoder's two
    decoders merged into one)."""
    if layout not in (OPTIMUM, TRANSFORMERS_JS):
        return
    to_optimum_names(package)
    if package.task in SEQ2SEQ:
        package.models = merge_decoder_files(package.models)


def js_dtype(dtype: str, quant: str | None = None) -> tuple[str, str]:
    """(transformers.js dtype name, file-name suffix) of a build dtype and quantization."""
    return QUANT_SUFFIX[quant][dtype]


def onnx_filename(key: str, dtype: str, quant: str | None = None) -> str:
    return f"{'model' if key == 'model' else key}{js_dtype(dtype, quant)[1]}.onnx"


def transformers_js_config(raw: dict[str, Any], dtype: str, filenames: list[str],
                           quant: str | None = None) -> dict:
    """config.json: the checkpoint's, plus what transformers.js reads to find the files
    (its default dtype: the one the files are named for)."""
    section = {"dtype": js_dtype(dtype, quant)[0],
               "use_external_data_format": {name: 1 for name in filenames}}
    return {**raw, "transformers.js_config": section}


def generation_config(raw: dict[str, Any], generation: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's generation_config.json, or its token ids when it has none."""
    if generation:
        return generation
    keys = ("bos_token_id", "eos_token_id", "pad_token_id")
    return {key: raw[key] for key in keys if raw.get(key) is not None}


def write_transformers_js(package, folder: str, save_model, progress: bool) -> None:
    """Writes ``package`` into ``folder`` (a fresh staging folder) in this layout."""
    dtype, quant = package.build_dtype, package.quant
    os.makedirs(os.path.join(folder, SUBFOLDER))
    filenames = []
    for key, model in package.models.items():
        filename = onnx_filename(key, dtype, quant)
        save_model(model, os.path.join(folder, SUBFOLDER, filename), progress,
                   data_name=filename + "_data")
        filenames.append(filename)
    raw = package.hf_configs.get("config.json", {})
    if package.task in SEQ2SEQ:  # transformers.js sizes its cache only for this flag
        raw = {**raw, "is_encoder_decoder": True}  # (transformers' classes default it)
    _write_json(os.path.join(folder, "config.json"), transformers_js_config(raw, dtype, filenames, quant))
    _write_json(os.path.join(folder, "generation_config.json"),
                generation_config(raw, package.hf_configs.get("generation_config.json", {})))
    for name, content in package.extra_json.items():  # an image task's preprocessor_config.json
        _write_json(os.path.join(folder, name), content)
    for path in package.files_to_copy:
        shutil.copy2(path, os.path.join(folder, os.path.basename(path)))
    write_model_folder(package, folder,
                       written={"config.json", "generation_config.json", *package.extra_json})


def _write_json(path: str, content: dict) -> None:
    with open(path, "w") as f:
        json.dump(content, f, indent=2)
