"""Fuzzing config.json, safetensors headers and index files (hypothesis, derandomized).

Every generated checkpoint must satisfy testing/fuzz_property.py: a package
that loads in onnxruntime and matches transformers, or one `mobius: error:`
line naming the field / tensor / file, with nothing written or changed. Each
build runs in a forked child under a memory limit and an alarm
(testing/fork_server.py), so a bomb fails the example, not the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, configuration, given, settings
from hypothesis import strategies as st

from mobius.tiny.presets import TINY_PRESETS
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_sharded
from testing.fork_server import ForkServer
from testing.fuzz_property import check_build
from testing.hf_checkpoints import make_hf_checkpoint

# Hypothesis' own cache goes under the test's temporary folder, not the work tree.
configuration.set_hypothesis_home_dir(
    os.path.join(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp(prefix="fuzz-"), "hypothesis"))

FAMILIES = ("tiny-llama", "tiny-qwen3", "tiny-phi3", "tiny-gpt2")
DEEP = "<deep>"  # stands for 100,000 nested lists, spliced into the JSON text
_SETTINGS = settings(derandomize=True, max_examples=12, deadline=None, database=None,
                     suppress_health_check=list(HealthCheck))

VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 7, 10**9, 2**31, 2**63, 4 * 10**11]),
    st.sampled_from([0.0, -1.0, 0.5, 1e-30, 1e30, float("nan"), float("inf"), -float("inf")]),
    st.sampled_from(["false", "true", "x", "", "1e-5", "llama3"]),
    st.booleans(), st.none(), st.just(DEEP),
    st.lists(st.integers(-3, 300), max_size=3),
    st.dictionaries(st.sampled_from(["rope_type", "factor", "type"]),
                    st.sampled_from(["linear", "yarn", 2.0, -1, None]), max_size=2),
)
EXTRA_KEYS = ("rope_theta", "tie_word_embeddings", "head_dim", "rope_scaling",
              "partial_rotary_factor", "max_position_embeddings", "num_key_value_heads",
              "attention_bias", "rms_norm_eps", "bos_token_id", "eos_token_id")


@pytest.fixture(scope="module")
def server():
    with ForkServer() as server:
        yield server


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Transformers-written tiny checkpoints, made on first use."""
    root = tmp_path_factory.mktemp("bases")
    made = {}

    def get(preset: str, sharded: bool = False) -> str:
        key = (preset, sharded)
        if key not in made:
            folder = make_hf_checkpoint(str(root / f"{preset}-{sharded}"), preset)
            if sharded:
                _reshard(folder)
            made[key] = folder
        return made[key]

    return get


def _reshard(folder: str) -> None:
    for name in os.listdir(folder):
        if name.endswith(".safetensors") or name.endswith(".index.json"):
            checkpoint = SafetensorsCheckpoint(folder)
            break
    items = [(n, np.array(checkpoint.read(n))) for n in checkpoint.names()]
    del checkpoint
    for name in os.listdir(folder):
        if name.startswith("model") and ("safetensors" in name):
            os.remove(os.path.join(folder, name))
    write_sharded(folder, items, 2)


def _copy(base: str, scratch) -> tuple[str, str]:
    work = tempfile.mkdtemp(dir=scratch)
    folder = os.path.join(work, "ckpt")
    shutil.copytree(base, folder)
    return folder, os.path.join(work, "out")


def _dump(value) -> str:
    text = json.dumps(value)
    return text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000)


def _config_keys(preset: str) -> list[str]:
    raw = TINY_PRESETS[preset]
    keys = [*raw, *EXTRA_KEYS]
    keys += [f"{k}.{sub}" for k, v in raw.items() if isinstance(v, dict) for sub in v]
    return sorted(set(keys))


@pytest.mark.shard_group("config")
@pytest.mark.parametrize("preset", FAMILIES)
def test_fuzzed_config(preset, server, bases, tmp_path_factory):
    base, scratch = bases(preset), tmp_path_factory.mktemp("config")
    keys = _config_keys(preset)

    @_SETTINGS
    @given(st.lists(st.tuples(st.sampled_from(keys), st.one_of(VALUES, st.just("<delete>"))),
                    min_size=1, max_size=2))
    def example(changes):
        folder, out = _copy(base, scratch)
        with open(os.path.join(folder, "config.json")) as f:
            raw = json.load(f)
        for key, value in changes:
            parent, _, leaf = key.rpartition(".")
            target = raw.get(parent) if parent else raw
            if not isinstance(target, dict):
                continue
            if value == "<delete>":
                target.pop(leaf, None)
            else:
                target[leaf] = value
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write(_dump(raw))
        names = ("config.json", "tensor", *(k.rpartition(".")[2] for k, _ in changes))
        check_build(server, folder, out, names, base)

    example()


HEADER_FIELDS = st.sampled_from(["dtype", "shape", "data_offsets", "entry", "extra", "twice",
                                 "metadata", "length"])
HEADER_VALUES = st.one_of(
    VALUES, st.sampled_from(["F32", "F16", "BF16", "I64", "F8_E4M3", "BOOL", "U8"]),
    st.lists(st.integers(-5, 10**6), min_size=0, max_size=3),
    st.lists(st.sampled_from([0, 4, 8, 64, 2**62, 10**12]), min_size=2, max_size=2),
)


@pytest.mark.shard_group("safetensors")
@_SETTINGS
@given(field=HEADER_FIELDS, value=HEADER_VALUES, which=st.integers(0, 10**6))
def test_fuzzed_safetensors_header(field, value, which, server, bases, tmp_path_factory):
    base = bases("tiny-llama")
    folder, out = _copy(base, tmp_path_factory.mktemp("header"))
    path = os.path.join(folder, "model.safetensors")
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    names = sorted(k for k in header if k != "__metadata__")
    name = names[which % len(names)]
    text, length = _mutate_header(header, name, field, value, len(data))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", length if length is not None else len(text)) + text + data)
    check_build(server, folder, out, ("model.safetensors", "tensor", name), base)


def _mutate_header(header: dict, name: str, field: str, value, size: int):
    """The mutated header text and the length to write before it (None: the true length)."""
    length = None
    if field in ("dtype", "shape", "data_offsets"):
        header[name][field] = value
    elif field == "entry":
        header[name] = value
    elif field == "extra":
        header["extra.tensor"] = {"dtype": "F32", "shape": [2],
                                  "data_offsets": value if isinstance(value, list) else [0, 8]}
    elif field == "metadata":
        header["__metadata__"] = value
    elif field == "length":
        length = value if isinstance(value, int) and 0 <= value < 2**64 else size
    text = _dump(header)
    if field == "twice":  # the same tensor name twice in one object
        entry = json.dumps(header[name])
        text = text[:-1] + f", {json.dumps(name)}: {entry}}}"
    return text.encode(), length


INDEX_VALUES = st.one_of(
    VALUES, st.sampled_from(["../model-00001-of-00002.safetensors", "/etc/passwd",
                             "missing.safetensors", "a/../model-00002-of-00002.safetensors",
                             "model-00001-of-00002.safetensors", "model.safetensors.index.json"]))


@pytest.mark.shard_group("index")
@_SETTINGS
@given(field=st.sampled_from(["entry", "drop", "add", "weight_map", "root"]),
       value=INDEX_VALUES, which=st.integers(0, 10**6))
def test_fuzzed_index(field, value, which, server, bases, tmp_path_factory):
    base = bases("tiny-llama", sharded=True)
    folder, out = _copy(base, tmp_path_factory.mktemp("index"))
    path = os.path.join(folder, "model.safetensors.index.json")
    with open(path) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    name = sorted(weight_map)[which % len(weight_map)]
    if field == "entry":
        weight_map[name] = value
    elif field == "drop":
        del weight_map[name]
    elif field == "add":
        weight_map["not.in.any.shard"] = value
    elif field == "weight_map":
        index["weight_map"] = value
    else:
        index = value
    with open(path, "w") as f:
        f.write(_dump(index))
    check_build(server, folder, out, ("index.json", "safetensors", "tensor", name), base)


@pytest.mark.shard_group("accepted")
@pytest.mark.parametrize("change", [{"rms_norm_eps": 0.05}, {"rope_theta": 50.0},
                                    {"initializer_range": 7}])
def test_property_holds_for_accepted_changes(change, server, bases, tmp_path_factory):
    """The "built" branch of the property: the package matches transformers on the change."""
    base = bases("tiny-llama")
    folder, out = _copy(base, tmp_path_factory.mktemp("accepted"))
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    raw.update(change)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f)
    assert check_build(server, folder, out, ("config.json",), base) == "built"
