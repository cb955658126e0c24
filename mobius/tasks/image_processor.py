"""preprocessor_config.json of an image package: what turns an image into the
graph's pixel_values (transformers' AutoImageProcessor reads it).

The checkpoint's own file is carried over (read by :func:`read_extras` into the
config, so a malformed one fails before any graph is built), fitted to the
graph's image size where it makes another (with a warning); a checkpoint
without one gets the family's processor for the configured image size (the
module's ``image_processor()``), since the graph takes only that size.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from mobius.checkpoint_files import contained_file
from mobius.errors import ConfigError
from mobius.json_input import read_json_file

logger = logging.getLogger(__name__)

FILE = "preprocessor_config.json"
RAW_KEY = "mobius_preprocessor_config"  #: config.raw key read_extras fills

IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
HALF = [0.5, 0.5, 0.5]
BILINEAR, BICUBIC = 2, 3  #: PIL resample codes, as the processors store them


def read_extras(folder: str) -> dict[str, Any]:
    """{RAW_KEY: the checkpoint's preprocessor_config.json} when it has one, else {}."""
    path = contained_file(folder, FILE, "the image processor", ConfigError)
    if not os.path.isfile(path):
        return {}
    data = read_json_file(path, FILE, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{FILE} must hold a JSON object")
    return {RAW_KEY: data}


def processor_files(module, config) -> Mapping[str, Any]:
    """{"preprocessor_config.json": the checkpoint's (fitted to the graph's image size),
    else the module's default}."""
    stored = config.raw.get(RAW_KEY)
    if stored is None:
        return {FILE: module.image_processor()}
    pixels = next(spec for spec in module.inputs if spec.name == "pixel_values")
    return {FILE: fit_to_size(stored, pixels.dims[-1])}


def output_size(processor: Mapping[str, Any]) -> tuple[int, int] | None:
    """(height, width) of the images the processor makes; None where it keeps aspect."""
    if processor.get("do_center_crop") and isinstance(processor.get("crop_size"), dict):
        crop = processor["crop_size"]
        return crop.get("height"), crop.get("width")
    size = processor.get("size")
    if isinstance(size, dict) and "height" in size:
        return size.get("height"), size.get("width")
    return None


def fit_to_size(processor: Mapping[str, Any], size: int) -> dict[str, Any]:
    """``processor`` made to output size x size, the graph's input, resizing in the same
    proportion (DINOv2 checkpoints configure 518 px but process 256 -> 224 crops)."""
    made = output_size(processor)
    if made == (size, size):
        return dict(processor)
    logger.warning("%s makes %s images; the graph takes %d x %d (the config's image_size): "
                   "the package's copy resizes to that", FILE, made or "aspect-kept", size, size)
    fitted = dict(processor)
    resize = processor.get("size")
    if made is not None and processor.get("do_center_crop") and isinstance(resize, dict):
        ratio = size / made[0]
        fitted["size"] = {k: round(v * ratio) for k, v in resize.items()}
        fitted["crop_size"] = {"height": size, "width": size}
    else:
        fitted.update(do_resize=True, size={"height": size, "width": size},
                      do_center_crop=False)
    return fitted


def resize_processor(kind: str, size: int, mean, std, resample: int) -> dict[str, Any]:
    """A processor that resizes straight to size x size (ViT, SigLIP)."""
    return {"image_processor_type": kind, "do_resize": True,
            "size": {"height": size, "width": size}, "resample": resample,
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": mean, "image_std": std}


def crop_processor(kind: str, size: int, mean, std, resample: int) -> dict[str, Any]:
    """Resize the shortest edge to size, centre-crop size x size (CLIP, DINOv2)."""
    return {**resize_processor(kind, size, mean, std, resample),
            "size": {"shortest_edge": size}, "do_center_crop": True,
            "crop_size": {"height": size, "width": size}, "do_convert_rgb": True}
