"""ModelPackage.save: atomic (nothing half-written, a previous package survives a failed
save), genai_config.json built from config.json + generation_config.json, tokenizer
files copied."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import mobius
from mobius.errors import OutputError
from mobius.package.manifest import MANIFEST
from mobius.tiny.checkpoint import make_tiny_checkpoint

GENERATION = {"bos_token_id": 1, "eos_token_id": [2, 5], "pad_token_id": 0, "do_sample": True,
              "temperature": 0.7, "top_k": 40, "top_p": 0.9, "repetition_penalty": 1.1}
EXTRA_TOKENIZER_FILES = {"special_tokens_map.json": '{"eos_token": "</s>"}',
                         "chat_template.jinja": "{{ messages }}"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt") / "llama"))
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump(GENERATION, f)
    for name, text in EXTRA_TOKENIZER_FILES.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    with open(os.path.join(folder, "README.md"), "w") as f:
        f.write("not part of the package")
    return folder


@pytest.fixture(scope="module")
def saved(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("saved") / "pkg"
    path = mobius.build(checkpoint).save(str(out))
    assert path == str(out)
    return out


def _snapshot(folder) -> dict[str, bytes]:
    result = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            result[name] = f.read()
    return result


class Boom(RuntimeError):
    pass


def _failing_package(checkpoint, observed: list, error=Boom):
    """A real package whose last external-data initializer (a weight: small constants
    stay inside model.onnx) fails to load while the package is saved."""
    package = mobius.build(checkpoint)
    graph = package.model.graph
    name, value = [(n, v) for n, v in graph.initializers.items()
                   if v.const_value.nbytes >= 1024][-1]
    original = value.const_value

    def load():
        # The save is under way: the staging folder exists and already holds weights.
        parent = observed[0]
        observed.append(sorted(os.listdir(parent)))
        raise error("disk on fire")

    value.const_value = ir.LazyTensor(load, original.dtype, original.shape, name=name)
    return package


# ---------------------------------------------------------------------------
# Atomic save
# ---------------------------------------------------------------------------


def test_failed_save_leaves_nothing(checkpoint, tmp_path):
    observed = [str(tmp_path)]
    package = _failing_package(checkpoint, observed)
    with pytest.raises(Boom):
        package.save(str(tmp_path / "out"))
    # The failure really was mid-save, inside a staging folder beside the output ...
    assert len(observed) == 2
    assert [n for n in observed[1] if n.startswith(".out.partial-")], observed[1]
    # ... and nothing of it is left.
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_failed_overwrite_keeps_the_previous_package(checkpoint, saved, tmp_path, error):
    out = tmp_path / "out"
    shutil.copytree(saved, out)
    before = _snapshot(out)
    package = _failing_package(checkpoint, [str(tmp_path)], error)
    with pytest.raises(error):
        package.save(str(out), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no staging / backup folders left
    assert _snapshot(out) == before


def test_overwrite_replaces_and_cleans_up(checkpoint, saved, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(saved, out)
    (out / "stale.bin").write_bytes(b"old")  # a file only the old build wrote
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].append("stale.bin")
    (out / MANIFEST).write_text(json.dumps(manifest))
    mobius.build(checkpoint, dtype="f16").save(str(out), overwrite=True)
    assert "stale.bin" not in os.listdir(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert model.graph.input[-1].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_refuses_non_empty_folder_without_overwrite(checkpoint, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(OutputError, match=r"is not empty; save\(\.\.\., overwrite=True\)") as e:
        mobius.build(checkpoint).save(str(out))
    assert "--overwrite" not in str(e.value)  # the Python API has no such flag
    assert _snapshot(out) == {"mine.txt": b"keep"}
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_refuses_a_file_as_output(checkpoint, tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(OutputError, match="exists and is not a folder"):
        mobius.build(checkpoint).save(str(tmp_path / "out"))


def test_checkpoint_changed_under_the_build_fails_cleanly(tmp_path):
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    package = mobius.build(folder)  # headers read, weights not yet
    weights = os.path.join(folder, "model.safetensors")
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(mobius.MobiusError, match="model.safetensors"):
        package.save(str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


# ---------------------------------------------------------------------------
# What a saved package holds
# ---------------------------------------------------------------------------


def test_package_files(saved, checkpoint):
    names = set(os.listdir(saved))
    assert {"model.onnx", "model.onnx.data", "genai_config.json", "config.json",
            "tokenizer.json", "tokenizer_config.json", *EXTRA_TOKENIZER_FILES} <= names
    assert "README.md" not in names
    assert not any(n.endswith(".safetensors") for n in names)


def test_tokenizer_files_are_copied_verbatim(saved, checkpoint):
    for name in ("tokenizer.json", "tokenizer_config.json", *EXTRA_TOKENIZER_FILES):
        with open(os.path.join(checkpoint, name), "rb") as a, open(saved / name, "rb") as b:
            assert a.read() == b.read(), name


def test_weights_are_external_and_relative(saved, tmp_path):
    model = onnx.load(str(saved / "model.onnx"), load_external_data=False)
    big = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert big, "expected external initializers"
    for tensor in big:
        location = {e.key: e.value for e in tensor.external_data}["location"]
        assert location == "model.onnx.data"
    # Relocatable: a moved package still loads with its weights.
    moved = tmp_path / "moved"
    shutil.copytree(saved, moved)
    loaded = onnx.load(str(moved / "model.onnx"))
    embed = next(t for t in loaded.graph.initializer if "embed_tokens" in t.name)
    assert onnx.numpy_helper.to_array(embed).shape == (1031, 64)


def test_saved_weights_equal_the_checkpoint(saved, checkpoint):
    from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

    model = onnx.load(str(saved / "model.onnx"))
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    source = SafetensorsCheckpoint(checkpoint)
    embed = next(v for k, v in weights.items() if k.endswith("embed_tokens.weight"))
    np.testing.assert_array_equal(embed, source.read("model.embed_tokens.weight"))
    lm_head = next(v for k, v in weights.items() if k.endswith("lm_head.weight"))
    np.testing.assert_array_equal(lm_head, source.read("lm_head.weight"))  # Gemm(transB=1) layout


def test_genai_config_fields(saved, checkpoint):
    with open(saved / "genai_config.json") as f:
        genai = json.load(f)
    with open(os.path.join(checkpoint, "config.json")) as f:
        raw = json.load(f)
    model, search = genai["model"], genai["search"]
    assert model["eos_token_id"] == [2, 5]  # the list, since there are several
    assert model["bos_token_id"] == 1
    assert model["pad_token_id"] == 0
    assert model["context_length"] == raw["max_position_embeddings"] == 256
    assert model["vocab_size"] == 1031
    decoder = model["decoder"]
    assert decoder["filename"] == "model.onnx"
    assert decoder["num_hidden_layers"] == 2 and decoder["num_key_value_heads"] == 2
    assert decoder["head_size"] == 16 and decoder["hidden_size"] == 64
    # The names genai will use must be the graph's names.
    onnx_model = onnx.load(str(saved / "model.onnx"), load_external_data=False)
    inputs = {i.name for i in onnx_model.graph.input}
    outputs = {o.name for o in onnx_model.graph.output}
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert decoder["inputs"][key] in inputs
    assert decoder["inputs"]["past_key_names"] % 1 in inputs
    assert decoder["inputs"]["past_value_names"] % 1 in inputs
    assert decoder["outputs"]["logits"] in outputs
    assert decoder["outputs"]["present_key_names"] % 1 in outputs
    # Search defaults come from generation_config.json.
    assert search["do_sample"] is True
    assert search["temperature"] == pytest.approx(0.7)
    assert search["top_k"] == 40
    assert search["top_p"] == pytest.approx(0.9)
    assert search["repetition_penalty"] == pytest.approx(1.1)
    assert search["max_length"] == 256


def test_single_eos_is_an_int_and_greedy_defaults(tmp_path):
    folder = make_tiny_checkpoint("tiny-qwen3", str(tmp_path / "ckpt"))  # eos 2, do_sample false
    mobius.build(folder).save(str(tmp_path / "out"))
    with open(tmp_path / "out" / "genai_config.json") as f:
        genai = json.load(f)
    assert genai["model"]["eos_token_id"] == 2
    assert genai["search"]["do_sample"] is False
    assert genai["search"]["top_k"] == 1  # greedy
    assert genai["model"]["decoder"]["head_size"] == 32  # explicit head_dim, not 64 / 4


def test_package_folder_has_normal_permissions(saved):
    """The staging folder comes from mkdtemp (0700); the package must not stay private."""
    import stat

    mode = stat.S_IMODE(os.stat(saved).st_mode)
    assert mode == 0o777 & ~_process_umask()


def _process_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
