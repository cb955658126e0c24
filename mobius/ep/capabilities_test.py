"""EpCapabilities: normalization, immutability, __post_init__ consistency checks,
and what each built-in EP declares (DESIGN.md's EP table)."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
import pytest

from mobius.ep import contrib_ops
from mobius.ep.capabilities import FLOAT_DTYPES, EpCapabilities
from mobius.ep.registry import ep_registry, get_ep

F32, F16, BF16 = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16
GQA = {contrib_ops.GQA}
SKIP = {contrib_ops.SKIP_LAYER_NORM, contrib_ops.SKIP_SIMPLIFIED_LAYER_NORM}


# -- normalization and immutability ----------------------------------------------


def test_defaults_describe_a_portable_target():
    caps = EpCapabilities(name="x")
    assert caps.dtypes == FLOAT_DTYPES
    assert caps.gqa_dtypes == frozenset() and caps.contrib_ops == frozenset()
    assert caps.supports_if and caps.supports_shape and caps.supports_int64
    assert dict(caps.provider_options) == {}
    assert caps.tasks is None


def test_sets_become_frozensets():
    caps = EpCapabilities(name="x", gqa_dtypes=[F32], qkv_pack_dtypes=(F32,),
                          contrib_ops=["GroupQueryAttention"], tasks=["text-generation"])
    for field in ("dtypes", "compute_dtypes", "gqa_dtypes", "qkv_pack_dtypes", "contrib_ops",
                  "tasks"):
        assert isinstance(getattr(caps, field), frozenset), field


def test_frozen_and_provider_options_read_only():
    options = {"cuda": {"enable_cuda_graph": "0"}}
    caps = EpCapabilities(name="x", provider_options=options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.name = "y"
    with pytest.raises(TypeError):
        caps.provider_options["dml"] = {}
    with pytest.raises(TypeError):
        caps.provider_options["cuda"]["enable_cuda_graph"] = "1"
    options["cuda"]["enable_cuda_graph"] = "1"  # the caller's dict is copied, not aliased
    assert caps.provider_options["cuda"]["enable_cuda_graph"] == "0"


def test_equal_and_hashable_by_value():
    a = EpCapabilities(name="x", gqa_dtypes={F32}, contrib_ops=GQA)
    b = EpCapabilities(name="x", gqa_dtypes=[F32], contrib_ops=list(GQA))
    assert a == b
    assert a != dataclasses.replace(a, description="other")


def test_queries():
    caps = get_ep("cuda")
    assert caps.fuses_gqa(F16) and not caps.fuses_gqa(F32)
    assert caps.packs_qkv(BF16) and not caps.packs_qkv(F32)
    assert caps.has_kernel("GroupQueryAttention") and not caps.has_kernel("Attention")


def test_summary_is_plain_data():
    import json

    summary = get_ep("trt-rtx").summary()
    json.dumps(summary)  # serializable
    assert summary["name"] == "trt-rtx"
    assert summary["gqa_dtypes"] == ["BFLOAT16", "FLOAT16"]
    assert summary["provider_options"] == {"NvTensorRtRtx": {"enable_cuda_graph": "1"}}


# -- __post_init__ consistency checks ------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    (dict(name=""), "name must be a non-empty string"),
    (dict(name=None), "name must be a non-empty string"),
    (dict(name="x", gqa_dtypes={F32}), "GroupQueryAttention is not in contrib_ops"),
    (dict(name="x", compute_dtypes={F32, ir.DataType.INT8}), "must be float types"),
    (dict(name="x", dtypes={ir.DataType.INT64}), "must be float types"),
    (dict(name="x", supports_skip_layer_norm=True), "Skip\\*LayerNormalization contrib ops"),
    (dict(name="x", supports_skip_layer_norm=True,
          contrib_ops={contrib_ops.SKIP_SIMPLIFIED_LAYER_NORM}),
     "Skip\\*LayerNormalization contrib ops"),
    (dict(name="x", qkv_pack_dtypes={F16}, gqa_dtypes={F32}, contrib_ops=GQA),
     "QKV packing is only defined for dtypes where GQA is fused"),
    (dict(name="x", default_int4_accuracy_level=5), "accuracy_level must be in 0..4"),
    (dict(name="x", default_int4_accuracy_level=-1), "accuracy_level must be in 0..4"),
    (dict(name="x", enable_graph_capture=True), "graph capture needs the provider option"),
    (dict(name="x", graph_capture_option="enable_cuda_graph"),
     "a graph capture option belongs to one onnxruntime-genai provider"),
    (dict(name="x", ort_provider="cuda"), "not an onnxruntime provider name"),
    (dict(name="x", quant_form="qdq"), "quant_form must be one of"),
    (dict(name="x", quant_embedding=True), "quant_embedding needs the GatherBlockQuantized"),
    (dict(name="x", quant_bits={2, 4}), "MatMulNBits takes 4 or 8 bits"),
    (dict(name="x", quant_block_sizes={32, 48}), "powers of two in 16..256"),
    (dict(name="x", quant_block_sizes={512}), "powers of two in 16..256"),
    (dict(name="x", quant_block_sizes={128}), "default_quant_block_size is not in"),
    (dict(name="x", quant_zero_points=False, default_quant_symmetric=False),
     "asymmetric default needs quant_zero_points"),
    (dict(name="x", compute_dtypes={F16}), "compute_dtypes must include FLOAT"),
    (dict(name="x", compute_dtypes={F32}, gqa_dtypes={F16}, contrib_ops=GQA),
     "GQA dtypes must be computed natively"),
])
def test_inconsistent_capabilities_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EpCapabilities(**kwargs)


def test_consistent_capabilities_are_accepted():
    caps = EpCapabilities(
        name="full",
        gqa_dtypes={F16}, qkv_pack_dtypes={F16}, supports_skip_layer_norm=True,
        contrib_ops=GQA | SKIP, enable_graph_capture=True, graph_capture_option="enable_cuda_graph",
        provider_options={"cuda": {"enable_cuda_graph": "1"}}, default_int4_accuracy_level=4,
    )
    assert caps.packs_qkv(F16)


# -- the built-in EPs (DESIGN.md's table) ---------------------------------------------

#: name -> GQA dtypes, as DESIGN.md's EP table states them.
DESIGN_GQA = {
    "default": set(),
    "cpu": {F32},
    "cuda": {F16, BF16},
    "dml": {F16},
    "webgpu": {F32, F16},
    "mlx": {F32, F16, BF16},
    "trt-rtx": {F16, BF16},
    "onnx-standard": set(),
    "openvino": set(),
    "qnn": set(),
}


@pytest.mark.parametrize("name", sorted(DESIGN_GQA))
def test_builtin_gqa_dtypes_match_the_design(name):
    assert set(get_ep(name).gqa_dtypes) == DESIGN_GQA[name]


@pytest.mark.parametrize("name", sorted(DESIGN_GQA))
def test_builtin_contrib_ops_are_known_and_gqa_dtypes_buildable(name):
    caps = get_ep(name)
    emitted = contrib_ops.ORT_COMMON | {contrib_ops.MOE, contrib_ops.PACKED_MHA, contrib_ops.QMOE,
                                        contrib_ops.GATHER_BLOCK_QUANTIZED,
                                        contrib_ops.FUSED_MATMUL}
    assert caps.contrib_ops <= emitted, caps.contrib_ops - emitted
    assert caps.gqa_dtypes <= caps.dtypes  # a GQA dtype the EP cannot even build is dead data


def test_portable_targets():
    default, standard = get_ep("default"), get_ep("onnx-standard")
    assert default.keep_function_bodies and not default.contrib_ops
    assert not standard.keep_function_bodies and not standard.contrib_ops
    for caps in (default, standard):
        assert not caps.provider_options and not caps.gqa_dtypes


def test_dml_constraints():
    dml = get_ep("dml")
    assert not dml.supports_fused_rope and not dml.qkv_pack_dtypes and not dml.supports_if
    assert set(dml.provider_options) == {"dml"}


def test_webgpu_constraints():
    webgpu = get_ep("webgpu")
    assert not webgpu.supports_shape and not webgpu.supports_int64 and not webgpu.supports_if
    assert webgpu.use_concrete_dims and webgpu.default_int4_accuracy_level == 4
    assert set(webgpu.provider_options) == {"webgpu"}


def test_trt_rtx_constraints():
    trt = get_ep("trt-rtx")
    assert not trt.supports_skip_layer_norm and not trt.has_kernel(contrib_ops.SKIP_LAYER_NORM)
    assert trt.enable_graph_capture
    assert set(trt.provider_options) == {"NvTensorRtRtx"}


def test_cuda_and_cpu():
    cuda, cpu = get_ep("cuda"), get_ep("cpu")
    assert cuda.supports_skip_layer_norm and cuda.packs_qkv(F16) and cuda.fuses_moe(F16)
    assert set(cuda.provider_options) == {"cuda"}
    assert cpu.default_int4_accuracy_level == 4 and not cpu.provider_options


def test_openvino_precision_follows_the_build():
    """genai_config pins OpenVINO's inference precision to the build dtype (bf16 on AMX
    CPUs otherwise) and, for quantized builds, keeps MatMulNBits' activations in float."""
    import json

    openvino = get_ep("openvino")
    assert openvino.expand_standard_ops == {"RMSNormalization", "RotaryEmbedding", "Attention"}
    assert not openvino.supports_scatter_reduction and openvino.contrib_ops == {"MatMulNBits"}
    f16 = openvino.provider_options_for(F16, quantized=False)["OpenVINO"]
    assert f16["device_type"] == "CPU"
    assert json.loads(f16["load_config"]) == {"CPU": {"INFERENCE_PRECISION_HINT": "f32"}}
    int4 = json.loads(openvino.provider_options_for(F32, quantized=True)["OpenVINO"]["load_config"])
    assert int4 == {"CPU": {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}}
    assert get_ep("cuda").provider_options_for(F16, quantized=True) == {"cuda": {}}


def test_static_shapes_need_a_chunk_inside_the_context():
    assert get_ep("qnn").static_context_length == 256 and get_ep("qnn").static_chunk == 8
    for context, chunk in ((256, 0), (0, 8), (8, 8), (8, 16)):
        with pytest.raises(ValueError, match="static shapes"):
            EpCapabilities(name="x", static_context_length=context, static_chunk=chunk)


def test_mlx_unpacked_qkv():
    mlx = get_ep("mlx")
    assert not mlx.qkv_pack_dtypes and mlx.supports_fused_rope


#: onnxruntime-genai provider name (genai_config) -> the onnxruntime provider it drives.
GENAI_TO_ORT = {"cuda": "CUDAExecutionProvider", "dml": "DmlExecutionProvider",
                "webgpu": "WebGpuExecutionProvider",
                "NvTensorRtRtx": "NvTensorRTRTXExecutionProvider",
                "OpenVINO": "OpenVINOExecutionProvider", "QNN": "QNNExecutionProvider"}


@pytest.mark.parametrize("ep", sorted(ep_registry.names()))
def test_ort_provider_is_the_one_genai_drives(ep):
    """An EP's onnxruntime provider agrees with the genai provider its packages name; a
    package without one runs on the CPU provider (MLX: on no onnxruntime provider)."""
    caps = get_ep(ep)
    named = [GENAI_TO_ORT[name] for name in caps.provider_options]
    expected = named[0] if named else (None if ep == "mlx" else "CPUExecutionProvider")
    assert caps.ort_provider == expected

