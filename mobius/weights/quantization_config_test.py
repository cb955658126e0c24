import pytest

from mobius.errors import ConfigError
from mobius.weights.quantization_config import read_quantization_config


def test_float_checkpoint_has_no_format():
    assert read_quantization_config({"model_type": "llama"}) is None


def test_gptq_v1_adds_one_to_stored_zeros_and_v2_does_not():
    v1 = read_quantization_config({"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}})
    assert (v1.method, v1.bits, v1.group_size, v1.zero_offset) == ("gptq", 4, 128, 1)
    v2 = read_quantization_config({"quantization_config": {
        "quant_method": "gptq", "bits": 8, "group_size": -1, "checkpoint_format": "gptq_v2"}})
    assert (v2.bits, v2.group_size, v2.zero_offset) == (8, None, 0)


def test_awq_reads_both_spellings_of_bits_and_group_size():
    new = read_quantization_config({"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm"}})
    old = read_quantization_config({"quantization_config": {
        "quant_method": "AWQ", "w_bit": 4, "q_group_size": 64}})
    assert new == old
    assert (new.method, new.bits, new.group_size, new.zero_offset) == ("awq", 4, 64, 0)


def test_nested_text_config_is_read():
    fmt = read_quantization_config({"text_config": {"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 32}}})
    assert fmt.method == "awq"


def test_fp8_block_and_per_tensor_and_mxfp4():
    block = read_quantization_config({"quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 64], "activation_scheme": "dynamic",
        "fmt": "e4m3"}})
    assert (block.method, block.block, block.ue8m0) == ("fp8", (128, 64), False)
    tensor = read_quantization_config({"quantization_config": {
        "quant_method": "fp8", "weight_block_size": None, "scale_fmt": "ue8m0"}})
    assert (tensor.block, tensor.ue8m0) == (None, True)
    mxfp4 = read_quantization_config({"quantization_config": {
        "quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}})
    assert mxfp4.method == "mxfp4"


@pytest.mark.parametrize("method", ["bitsandbytes", "fbgemm_fp8", "compressed-tensors", "hqq"])
def test_other_methods_are_refused_by_name(method):
    with pytest.raises(ConfigError, match=f"quant_method '{method}' is not supported"):
        read_quantization_config({"quantization_config": {"quant_method": method}})


@pytest.mark.parametrize("config, message", [
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "3-bit GPTQ is not supported"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"},
     "checkpoint_format 'marlin'"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "group_size must be positive"),
    ({"quant_method": "gptq", "bits": "4", "group_size": 128}, "bits must be an integer"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": {"+:.*q_proj": {}}},
     "quantization_config.dynamic"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"},
     "AWQ version 'gemv'"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False},
     "zero_point: false"),
    ({"quant_method": "awq", "bits": 8, "group_size": 128}, "8-bit AWQ is not supported"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "two positive integers"),
    ({"quant_method": "fp8", "weight_block_size": [0, 128]}, "two positive integers"),
    ({"quant_method": "fp8", "scale_fmt": "e4m3"}, "scale_fmt 'e4m3'"),
    ({"quant_method": "fp8", "expert_dtype": "fp4"}, "expert_dtype 'fp4'"),
    ({"quant_method": "fp8", "modules_to_convert": ["embed_tokens"]}, "modules_to_convert"),
])
def test_unsupported_settings_are_one_line_errors(config, message):
    with pytest.raises(ConfigError, match=message) as info:
        read_quantization_config({"quantization_config": config})
    assert "\n" not in str(info.value)
