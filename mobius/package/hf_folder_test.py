"""Every layout is a Hugging Face model folder: the checkpoint's configs byte for byte,
sentence-transformers' files for the tasks it loads, nothing from outside the checkpoint.

(transformers' and sentence-transformers' own reading of such folders:
testing/sentence_transformers_test.py.)
"""

import json
import os
import shutil

import pytest

from mobius.builder import build
from mobius.errors import ConfigError
from mobius.package.hf_folder import model_folder_files
from mobius.tiny.checkpoint import make_tiny_checkpoint

MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize"}]
ST_FILES = {"modules.json": MODULES,
            "sentence_bert_config.json": {"max_seq_length": 16, "do_lower_case": False},
            "config_sentence_transformers.json": {"similarity_fn_name": "cosine"},
            "1_Pooling/config.json": {"word_embedding_dimension": 32,
                                      "pooling_mode_mean_tokens": True}}


def _files(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder).replace(os.sep, "/")
                  for d, _, names in os.walk(folder) for f in names)


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _sentence_transformer(folder, files=ST_FILES):
    """tiny-bert with sentence-transformers' files; config.json rewritten with an odd
    spacing and key order that only a byte-for-byte copy keeps."""
    ckpt = make_tiny_checkpoint("tiny-bert", folder)
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(dict(sorted(config.items(), reverse=True)), f, indent=3)
    for name, content in files.items():
        os.makedirs(os.path.dirname(os.path.join(ckpt, name)), exist_ok=True)
        with open(os.path.join(ckpt, name), "w") as f:
            json.dump(content, f)
    return ckpt


@pytest.mark.parametrize("layout,onnx_file", [("genai", "model.onnx"),
                                               ("transformers.js", "onnx/model.onnx")])
def test_sentence_transformers_folder_in_every_layout(tmp_path, layout, onnx_file):
    ckpt = _sentence_transformer(str(tmp_path / "ckpt"))
    out = build(ckpt, layout=layout).save(str(tmp_path / "out"))
    files = _files(out)
    assert {*ST_FILES, "config.json", onnx_file} <= set(files), files
    for name in ST_FILES:
        assert _bytes(os.path.join(out, name)) == _bytes(os.path.join(ckpt, name)), name
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    if layout == "genai":
        assert _bytes(os.path.join(out, "config.json")) == _bytes(os.path.join(ckpt, "config.json"))
    else:  # the checkpoint's config plus transformers.js' section, none of mobius' own keys
        with open(os.path.join(ckpt, "config.json")) as f:
            assert {k: v for k, v in config.items() if k != "transformers.js_config"} == json.load(f)


def test_decoder_carries_config_and_generation_config(tmp_path):
    ckpt = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    out = build(ckpt).save(str(tmp_path / "out"))
    for name in ("config.json", "generation_config.json"):
        assert _bytes(os.path.join(out, name)) == _bytes(os.path.join(ckpt, name)), name


def test_a_task_sentence_transformers_does_not_load_gets_no_modules(tmp_path):
    ckpt = _sentence_transformer(str(tmp_path / "ckpt"))
    assert model_folder_files(ckpt, sentence_transformers=False) == ["config.json"]
    assert model_folder_files(ckpt, sentence_transformers=True) == [
        "config.json", "modules.json", "sentence_bert_config.json",
        "config_sentence_transformers.json", "1_Pooling/config.json"]


def test_image_task_keeps_its_own_preprocessor_config(tmp_path):
    """The task fits preprocessor_config.json to the graph; the checkpoint's does not replace it."""
    ckpt = make_tiny_checkpoint("tiny-vit", str(tmp_path / "ckpt"))
    package = build(ckpt)
    out = package.save(str(tmp_path / "out"))
    with open(os.path.join(out, "preprocessor_config.json")) as f:
        assert json.load(f) == package.extra_json["preprocessor_config.json"]
    assert _bytes(os.path.join(out, "config.json")) == _bytes(os.path.join(ckpt, "config.json"))


def test_module_folder_outside_the_checkpoint_is_refused(tmp_path):
    modules = [MODULES[0], {**MODULES[1], "path": "../secrets"}]
    ckpt = _sentence_transformer(str(tmp_path / "ckpt"), {**ST_FILES, "modules.json": modules})
    os.makedirs(tmp_path / "secrets")
    with pytest.raises(ConfigError, match="outside the checkpoint"):
        model_folder_files(ckpt, sentence_transformers=True)


def test_module_file_linking_outside_is_refused(tmp_path):
    ckpt = _sentence_transformer(str(tmp_path / "ckpt"))
    (tmp_path / "secret.json").write_text("{}")
    os.symlink(tmp_path / "secret.json", os.path.join(ckpt, "1_Pooling", "extra.json"))
    with pytest.raises(ConfigError, match="leads outside the checkpoint"):
        model_folder_files(ckpt, sentence_transformers=True)


def test_module_with_weights_is_refused(tmp_path):
    ckpt = _sentence_transformer(str(tmp_path / "ckpt"))
    shutil.copyfile(os.path.join(ckpt, "model.safetensors"),
                    os.path.join(ckpt, "1_Pooling", "model.safetensors"))
    with open(os.path.join(ckpt, "1_Pooling", "model.safetensors"), "ab") as f:
        f.write(b"\0" * (1 << 20))
    with pytest.raises(ConfigError, match="with weights"):
        model_folder_files(ckpt, sentence_transformers=True)
