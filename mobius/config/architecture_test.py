"""ArchitectureConfig.from_dict: transformers 4.x / 5.x spellings and validation errors."""

from __future__ import annotations

import json
import os

import pytest

from mobius.config import architecture_cases as cases
from mobius.config.architecture import ArchitectureConfig, load_config
from mobius.config.architecture_cases import V4_LLAMA
from mobius.errors import ConfigError, MobiusError
from testing.reference_cases import case_dir

def _v5_from_v4() -> dict:
    """What transformers 5 itself writes for V4_LLAMA (the real conversion, not ours),
    recorded at build time (architecture_cases.py)."""
    with open(os.path.join(case_dir(cases, "v5_llama"), "converted.json")) as f:
        converted = json.load(f)
    assert "rope_scaling" not in converted and "torch_dtype" not in converted
    return converted


def _minimal(**changes) -> dict:
    raw = {
        "model_type": "llama",
        "vocab_size": 1031,
        "hidden_size": 64,
        "intermediate_size": 172,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


# ---------------------------------------------------------------------------
# Spellings
# ---------------------------------------------------------------------------


def test_v4_and_v5_spellings_normalize_to_the_same_config():
    v4 = ArchitectureConfig.from_dict(V4_LLAMA)
    v5_raw = _v5_from_v4()
    assert "rope_parameters" in v5_raw and v5_raw["dtype"] == "bfloat16"
    v5 = ArchitectureConfig.from_dict(v5_raw)
    assert v4 == v5
    assert v4.rope.rope_type == "llama3"
    assert v4.rope.theta == 500000.0
    assert v4.rope.factor == 8.0
    assert v4.rope.original_max_position_embeddings == 64
    assert v4.checkpoint_dtype == "bfloat16"
    assert v4.eos_token_id == (2, 5)


def test_rope_theta_top_level_vs_rope_parameters():
    v4 = ArchitectureConfig.from_dict(_minimal(rope_theta=1234.0))
    v5 = ArchitectureConfig.from_dict(
        _minimal(rope_parameters={"rope_type": "default", "rope_theta": 1234.0})
    )
    assert v4.rope.theta == v5.rope.theta == 1234.0
    assert v4.rope == v5.rope
    assert ArchitectureConfig.from_dict(_minimal()).rope.theta == 10000.0


def test_rope_scaling_legacy_type_key():
    # 4.x configs spelled the variant as "type" (and "su" for LongRoPE).
    legacy = ArchitectureConfig.from_dict(
        _minimal(rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 2.0})
    )
    modern = ArchitectureConfig.from_dict(
        _minimal(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    )
    assert legacy.rope.rope_type == modern.rope.rope_type == "linear"
    assert legacy.rope == modern.rope
    su = ArchitectureConfig.from_dict(
        _minimal(rope_scaling={"type": "su", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8})
    )
    assert su.rope.rope_type == "longrope"


def test_rope_scaling_null_means_default():
    config = ArchitectureConfig.from_dict(_minimal(rope_theta=42.0, rope_scaling=None))
    assert config.rope.rope_type == "default"
    assert config.rope.theta == 42.0


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
def test_checkpoint_dtype_either_spelling(key):
    assert ArchitectureConfig.from_dict(_minimal(**{key: "float16"})).checkpoint_dtype == "float16"


@pytest.mark.parametrize(
    "eos, expected",
    [(2, (2,)), ([2, 7, 9], (2, 7, 9)), ([2], (2,)), (None, ())],
)
def test_eos_token_id_int_or_list(eos, expected):
    config = ArchitectureConfig.from_dict(_minimal(eos_token_id=eos))
    assert config.eos_token_id == expected


def test_generation_config_overrides_eos_bos_pad():
    raw = _minimal(eos_token_id=2, bos_token_id=1, pad_token_id=0)
    generation = {"eos_token_id": [2, 11], "bos_token_id": 3, "pad_token_id": 4}
    config = ArchitectureConfig.from_dict(raw, generation)
    assert config.eos_token_id == (2, 11)
    assert config.bos_token_id == 3
    assert config.pad_token_id == 4
    # A generation_config without eos keeps config.json's.
    assert ArchitectureConfig.from_dict(raw, {"do_sample": True}).eos_token_id == (2,)


def test_generation_defaults_from_generation_config():
    config = ArchitectureConfig.from_dict(
        _minimal(), {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.9,
                     "repetition_penalty": 1.1}
    )
    gen = config.generation
    assert (gen.do_sample, gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty) == (
        True, 0.6, 20, 0.9, 1.1
    )
    default = ArchitectureConfig.from_dict(_minimal()).generation
    assert (default.do_sample, default.temperature, default.top_k) == (False, 1.0, 50)


def test_derived_fields():
    config = ArchitectureConfig.from_dict(_minimal())
    assert config.head_dim == 16  # hidden_size / num_attention_heads
    assert config.num_key_value_heads == 4  # defaults to num_attention_heads
    assert config.max_position_embeddings == 2048
    assert config.rope.rotary_dim == 16
    explicit = ArchitectureConfig.from_dict(_minimal(head_dim=32, num_key_value_heads=2))
    assert explicit.head_dim == 32 and explicit.rope.rotary_dim == 32
    partial = ArchitectureConfig.from_dict(_minimal(partial_rotary_factor=0.5))
    assert partial.rope.rotary_dim == 8


def test_flags_and_sliding_window():
    config = ArchitectureConfig.from_dict(
        _minimal(attention_bias=True, mlp_bias=True, tie_word_embeddings=True, sliding_window=8)
    )
    assert config.qkv_bias and config.o_bias and config.mlp_bias and config.tie_word_embeddings
    assert config.sliding_window == 8
    assert config.layer_sliding_window(0) == config.layer_sliding_window(1) == 8
    # Qwen2 spells "no sliding window" as use_sliding_window=false with a window size present.
    off = ArchitectureConfig.from_dict(_minimal(sliding_window=4096, use_sliding_window=False))
    assert off.sliding_window is None
    per_layer = ArchitectureConfig.from_dict(
        _minimal(sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    )
    assert per_layer.layer_sliding_window(0) == 8
    assert per_layer.layer_sliding_window(1) is None


def test_family_overrides_win():
    config = ArchitectureConfig.from_dict(_minimal(attention_bias=False), qkv_bias=True)
    assert config.qkv_bias is True and config.o_bias is False


# ---------------------------------------------------------------------------
# Validation: every error is a ConfigError that names the offending field.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
     "num_attention_heads"],
)
def test_missing_required_field_is_named(field):
    raw = _minimal()
    del raw[field]
    with pytest.raises(ConfigError, match=field):
        ArchitectureConfig.from_dict(raw)


@pytest.mark.parametrize("value", [0, -4, "64", 64.0, True])
def test_non_positive_or_non_integer_size_is_named(value):
    with pytest.raises(ConfigError, match=r"'hidden_size' must be a positive integer"):
        ArchitectureConfig.from_dict(_minimal(hidden_size=value))


def test_heads_not_divisible_by_kv_heads():
    with pytest.raises(ConfigError, match=r"num_attention_heads \(4\).*num_key_value_heads \(3\)"):
        ArchitectureConfig.from_dict(_minimal(num_key_value_heads=3))


def test_hidden_not_divisible_by_heads_without_head_dim():
    with pytest.raises(ConfigError, match=r"hidden_size \(64\).*num_attention_heads \(5\)"):
        ArchitectureConfig.from_dict(_minimal(num_attention_heads=5, num_key_value_heads=1))
    # ... but an explicit head_dim makes it fine.
    config = ArchitectureConfig.from_dict(
        _minimal(num_attention_heads=5, num_key_value_heads=1, head_dim=16)
    )
    assert config.head_dim == 16


def test_layer_types_length_mismatch():
    with pytest.raises(ConfigError, match="layer_types"):
        ArchitectureConfig.from_dict(_minimal(layer_types=["full_attention"]))


def test_unknown_rope_type_lists_supported():
    with pytest.raises(ConfigError, match=r"rope type 'banana'.*supported: default, linear"):
        ArchitectureConfig.from_dict(_minimal(rope_parameters={"rope_type": "banana"}))


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "llama3"])
def test_rope_type_without_factor(rope_type):
    with pytest.raises(ConfigError, match=r"needs rope_parameters.factor"):
        ArchitectureConfig.from_dict(_minimal(rope_parameters={"rope_type": rope_type}))


def test_odd_partial_rotary_dimension():
    with pytest.raises(ConfigError, match="partial_rotary_factor"):
        ArchitectureConfig.from_dict(_minimal(partial_rotary_factor=0.4375))  # 16 * 0.4375 = 7


def test_config_error_is_a_mobius_error():
    assert issubclass(ConfigError, MobiusError)


# ---------------------------------------------------------------------------
# load_config
# ---------------------------------------------------------------------------


def test_load_config_reads_both_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_minimal()))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 3]}))
    raw, generation = load_config(str(tmp_path))
    assert raw["model_type"] == "llama"
    assert generation == {"eos_token_id": [2, 3]}
    assert ArchitectureConfig.from_dict(raw, generation).eos_token_id == (2, 3)


def test_load_config_without_generation_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_minimal()))
    assert load_config(str(tmp_path))[1] == {}


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config.json is not valid JSON"):
        load_config(str(tmp_path))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="config.json must hold a JSON object"):
        load_config(str(tmp_path))


@pytest.mark.parametrize(
    "field, value",
    [("layer_types", 5), ("rope_scaling", [1, 2]), ("rope_parameters", "linear"),
     ("rms_norm_eps", "abc"), ("rope_parameters", {"rope_theta": None}),
     ("partial_rotary_factor", "x"),
     ("rope_parameters", {"rope_type": "longrope", "short_factor": 5, "long_factor": [1.0]})],
)
def test_wrongly_typed_values_are_config_errors(field, value):
    # Never a raw TypeError/ValueError traceback out of the CLI.
    with pytest.raises(ConfigError, match="config.json"):
        ArchitectureConfig.from_dict(_minimal(**{field: value}))
