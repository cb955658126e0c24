"""Reading sentence-transformers' modules.json / 1_Pooling/config.json: both spellings,
and one-line errors for what mobius cannot build."""

from __future__ import annotations

import json
import os

import pytest

from mobius.errors import ConfigError, UnsupportedModelError
from mobius.tasks.sentence_pooling import (RAW_KEY, SentencePooling, read_extras,
                                           read_sentence_pooling, sentence_pooling)

_TYPES = {"Transformer": "sentence_transformers.models.Transformer",
          "Pooling": "sentence_transformers.models.Pooling",
          "Normalize": "sentence_transformers.models.Normalize",
          "Dense": "sentence_transformers.models.Dense"}


def _write(folder, kinds, pooling: dict, pooling_path="1_Pooling"):
    modules = [{"idx": i, "name": str(i), "type": _TYPES[k],
                "path": "" if k == "Transformer" else (pooling_path if k == "Pooling"
                                                      else f"{i}_{k}")}
               for i, k in enumerate(kinds)]
    with open(os.path.join(folder, "modules.json"), "w") as f:
        json.dump(modules, f)
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling, f)
    return str(folder)


def test_a_plain_checkpoint_has_no_pooling(tmp_path):
    assert read_sentence_pooling(str(tmp_path)) is None
    assert read_extras(str(tmp_path)) == {}


@pytest.mark.parametrize("pooling,modes", [
    ({"pooling_mode": "mean"}, ("mean",)),
    ({"pooling_mode": ["lasttoken", "cls"]}, ("lasttoken", "cls")),  # given order
    ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}, ("cls", "mean")),
    ({"pooling_mode_cls_token": False}, ("mean",)),  # the old spelling's default
])
def test_both_spellings(tmp_path, pooling, modes):
    folder = _write(tmp_path, ["Transformer", "Pooling"], pooling)
    assert read_sentence_pooling(folder) == SentencePooling(modes, normalize=False)


def test_normalize_and_the_raw_round_trip(tmp_path):
    folder = _write(tmp_path, ["Transformer", "Pooling", "Normalize"], {"pooling_mode": "cls"})
    extras = read_extras(folder)
    assert sentence_pooling(extras) == SentencePooling(("cls",), normalize=True)
    assert list(extras) == [RAW_KEY]


@pytest.mark.parametrize("kinds,pooling,match", [
    (["Transformer", "Pooling", "Dense"], {"pooling_mode": "mean"}, "pipeline"),
    (["Transformer", "Pooling"], {"pooling_mode": "weightedmean"}, "weightedmean"),
    (["Transformer", "Pooling"], {"pooling_mode": "mean", "include_prompt": False},
     "include_prompt"),
])
def test_what_cannot_be_built_is_refused(tmp_path, kinds, pooling, match):
    with pytest.raises(UnsupportedModelError, match=match):
        read_sentence_pooling(_write(tmp_path, kinds, pooling))


@pytest.mark.parametrize("path", ["../outside", "/etc", ""])
def test_a_module_path_outside_the_checkpoint_is_refused(tmp_path, path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _write(folder, ["Transformer", "Pooling"], {"pooling_mode": "mean"}, pooling_path=path)
    with pytest.raises(ConfigError, match="outside the checkpoint"):
        read_sentence_pooling(str(folder))


def test_bad_json_is_one_line(tmp_path):
    folder = _write(tmp_path, ["Transformer", "Pooling"], {})
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_sentence_pooling(folder)
