"""The CTC package's preprocessor_config.json: how a client turns audio into
``input_values`` (Wav2Vec2FeatureExtractor: sampling rate, zero-mean unit-variance
normalization, padding, whether to send an attention mask).

The checkpoint's own file is read (Task.read_extras, kept under RAW_KEY in
config.raw) and written into the package as it is (Task.processor_files); a
checkpoint without one gets the hub's wav2vec2 defaults, with an attention mask
exactly where the graph takes one (layer-norm feature encoders).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from mobius.checkpoint_files import contained_file
from mobius.config.architecture import read_json

FILE = "preprocessor_config.json"
RAW_KEY = "mobius_preprocessor_config"
SAMPLING_RATE = 16000


def read_extras(folder: str) -> dict[str, Any]:
    """{RAW_KEY: the checkpoint's preprocessor_config.json} where it has one, else {}."""
    path = contained_file(folder, FILE, "the checkpoint")
    return {RAW_KEY: read_json(path)} if os.path.isfile(path) else {}


def default_preprocessor_config(return_attention_mask: bool) -> dict[str, Any]:
    return {"feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1,
            "sampling_rate": SAMPLING_RATE, "padding_value": 0.0, "padding_side": "right",
            "do_normalize": True, "return_attention_mask": return_attention_mask,
            "processor_class": "Wav2Vec2Processor"}


def processor_files(takes_mask: bool, raw: Mapping[str, Any]) -> dict[str, Any]:
    """{preprocessor_config.json: the checkpoint's, or the default}."""
    return {FILE: dict(raw.get(RAW_KEY) or default_preprocessor_config(takes_mask))}
