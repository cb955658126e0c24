"""Tied embeddings are stored once: for every family whose tiny checkpoint ties the
LM head to the input embedding, each package's initializers hold exactly the
checkpoint's bytes (plus small computed constants such as RoPE tables), and no
two initializers hold the same matrix in any layout (transposed, reshaped).
With --quant int4 --quant-embedding the matrix is quantized once where the EP
has GatherBlockQuantized and MatMulNBits kernels (mobius.quantize.emit_tied):
no float copy is left and no two initializers hold the same codes."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mobius.builder import build
from mobius.models.registry import FAMILIES
from mobius.tiny.presets import TINY_PRESETS
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from testing.ep_suite import Builds, Checkpoints
from testing.model_runs import family_checkpoint

TIED = [f for f in FAMILIES if TINY_PRESETS[f.tiny_preset].get("tie_word_embeddings")]
#: (EP, dtype): the generic graph, the CPU EP (whose head differs), lowered ones, each in
#: the EP's primary dtype (the EP suites' builds of every family: testing/ep_suite.py)
TARGETS = [("default", "f32"), ("cpu", "f32"), ("webgpu", "f16"), ("onnx-standard", "f32"),
           ("cuda", "f16")]
#: computed constants a package may add (RoPE cos/sin tables, masks): far
#: below one tiny embedding matrix (1031 x 48..80 floats, 198 KB or more)
CONSTANT_BYTES = 64 * 1024


def _model_files(folder: str) -> dict[str, onnx.ModelProto]:
    """A saved package's model files, external data loaded."""
    return {os.path.basename(path): onnx.load(path)
            for path in sorted(glob.glob(os.path.join(folder, "*.onnx")))}


def _stored_models(built) -> dict[str, onnx.ModelProto]:
    """An EP suite build's model files (each its own self-contained bytes)."""
    return {f"{key}.onnx": onnx.ModelProto.FromString(built.onnx_bytes(key))
            for key in built.serialized}


def _initializers(models: dict[str, onnx.ModelProto]) -> dict[str, np.ndarray]:
    return {f"{name}:{tensor.name}": numpy_helper.to_array(tensor)
            for name, model in models.items() for tensor in model.graph.initializer}


def _sessions_reading(models: dict[str, onnx.ModelProto], table_size: int) -> int:
    """How many of the package's model files hold a matrix of the table's size. Each
    file is its own onnxruntime session, so a table both an encoder and a decoder
    read (t5, bart: the shared token embedding) is stored once per file."""
    return sum(any(a.size == table_size for a in _initializers({n: m}).values())
               for n, m in models.items())


def _checkpoint_bytes(folder: str, itemsize: int, table: tuple, ignored=()) -> int:
    """The checkpoint's tensors, less those the family may leave unread (a multimodal
    checkpoint's towers beside the text model it builds) that are not the tied table: an
    ignorable spelling of the table (bart's model.shared) is the matrix stored once."""
    checkpoint = SafetensorsCheckpoint(folder)
    shapes = {n: tuple(checkpoint.info(n).shape) for n in checkpoint.names()}
    return sum(int(np.prod(shape)) * itemsize for n, shape in shapes.items()
               if shape == tuple(table) or not any(rule.matches(n) for rule in ignored))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(family):
        if family.name not in made:
            folder = tmp_path_factory.mktemp(f"ckpt-{family.name}")
            made[family.name] = family_checkpoint(str(folder), family)
        return made[family.name]

    return get


def test_the_tied_families_are_covered():
    assert {"qwen2", "gemma", "gpt2", "whisper"} <= {f.name for f in TIED}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The EP suites' builds (//ep/<ep>:builds in this target's data: built once for all)."""
    return Builds(Checkpoints(tmp_path_factory.mktemp("checkpoints")))


@pytest.mark.parametrize("ep, dtype", TARGETS, ids=lambda t: t)
@pytest.mark.parametrize("family", TIED, ids=lambda f: f.name)
def test_tied_matrix_is_stored_once(family, ep, dtype, builds):
    built = builds.get(family.name, ep, dtype)
    checkpoint = builds.checkpoints.folder(family.name)
    assert built.config.tie_word_embeddings
    models = _stored_models(built)
    itemsize = 2 if dtype == "f16" else 4
    table = SafetensorsCheckpoint(checkpoint).info(_table_name(checkpoint)).shape
    extra_sessions = _sessions_reading(models, int(np.prod(table))) - 1
    stored = sum(a.size * a.dtype.itemsize for a in _initializers(models).values()
                 if a.dtype.kind == "f")
    ignored = family.ignored_tensors(built.config)
    expected = (_checkpoint_bytes(checkpoint, itemsize, table, ignored)
                + extra_sessions * int(np.prod(table)) * itemsize)
    assert expected <= stored <= expected + CONSTANT_BYTES, (stored, expected)
    for name, model in models.items():
        _assert_no_duplicate_matrix(_initializers({name: model}))


#: (family, EP, dtype) of the int4 builds: every tied family on cpu (f32 scales), one
#: with f16 scales
QUANT_CASES = [(f, "cpu", "f32") for f in TIED] + [
    (f, "cuda", "f16") for f in TIED if f.name == "qwen2"]


@pytest.mark.parametrize("family, ep, dtype", QUANT_CASES,
                         ids=lambda t: getattr(t, "name", t))
def test_tied_matrix_is_quantized_once(family, ep, dtype, checkpoints, tmp_path):
    checkpoint = checkpoints(family)
    hidden = SafetensorsCheckpoint(checkpoint).info(_table_name(checkpoint)).shape[1]
    block = 32 if hidden % 32 == 0 else 16  # a block must divide H for the lookup
    package = build(checkpoint, execution_provider=ep, dtype=dtype, quant="int4",
                    quant_embedding=True, quant_block_size=block)
    vocab = package.config.vocab_size
    models = _model_files(package.save(str(tmp_path / "pkg")))
    arrays = _initializers(models)
    assert not any(a.dtype.kind == "f" and a.size == vocab * hidden for a in arrays.values())
    codes = [n for n, a in arrays.items() if a.dtype == np.uint8 and a.size == vocab * hidden // 2]
    # once per model file (session): t5 / bart encoders read the shared table too
    assert sorted(n.split(":")[0] for n in codes) == sorted(
        {n.split(":")[0] for n in codes}) and codes, codes
    for name, model in models.items():
        _assert_no_duplicate_matrix(_initializers({name: model}))


def _table_name(folder: str) -> str:
    """The checkpoint's token embedding: its one [vocab, hidden] tensor (Gemma 4's
    per-layer embedding table is [vocab, layers x its own width])."""
    checkpoint = SafetensorsCheckpoint(folder)
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    text = raw if "vocab_size" in raw else raw["text_config"]  # a VLM's text config
    hidden = next(text[k] for k in ("hidden_size", "d_model", "n_embd") if k in text)
    shape = [text["vocab_size"], hidden]
    names = [n for n in checkpoint.names() if list(checkpoint.info(n).shape) == shape]
    assert len(names) == 1, names
    return names[0]


def _assert_no_duplicate_matrix(arrays: dict[str, np.ndarray]) -> None:
    """Equal sorted values = the same matrix in some layout (random data never collides);
    float weights and quantized codes (uint8) alike."""
    seen: dict[tuple, str] = {}
    for name, array in arrays.items():
        if array.size < 1024 or array.dtype.kind not in "fu":
            continue
        key = (array.size, np.sort(array.reshape(-1)).tobytes())
        assert key not in seen, f"{name} holds the same values as {seen[key]}"
        seen[key] = name


def test_duplicate_check_catches_a_transposed_copy():
    matrix = np.random.default_rng(0).standard_normal((37, 41)).astype(np.float32)
    _assert_no_duplicate_matrix({"a": matrix, "b": matrix + 1})
    with pytest.raises(AssertionError, match="same values"):
        _assert_no_duplicate_matrix({"a": matrix, "b": np.ascontiguousarray(matrix.T)})
    codes = np.random.default_rng(1).integers(0, 256, (37, 2, 16), dtype=np.uint8)
    with pytest.raises(AssertionError, match="same values"):
        _assert_no_duplicate_matrix({"a": codes, "b": codes.reshape(37, 32)})
