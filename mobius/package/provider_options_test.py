"""genai_config.json per EP: provider options as onnxruntime-genai reads them,
graph capture, and past_present_share_buffer exactly when the decoder uses GQA."""

from __future__ import annotations

import json
import os

import onnx_ir as ir
import pytest

import mobius
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry, get_ep, register_ep
from mobius.package.provider_options import genai_provider_options, graph_capture_enabled
from mobius.weights.dtypes import SHORT_NAMES

#: (EP, KV buffers shared) -> the provider_options list genai_config must carry.
EXPECTED = {
    ("default", False): [],
    ("cpu", True): [],
    ("cpu", False): [],
    ("cuda", True): [{"cuda": {}}],
    ("cuda", False): [{"cuda": {}}],
    ("dml", True): [{"dml": {}}],  # genai's DML graph capture (on by default) stays on
    ("dml", False): [{"dml": {"enable_graph_capture": "0"}}],  # no static KV: capture off
    ("webgpu", True): [{"webgpu": {}}],
    ("webgpu", False): [{"webgpu": {}}],
    ("mlx", True): [],
    ("mlx", False): [],
    ("trt-rtx", True): [{"NvTensorRtRtx": {"enable_cuda_graph": "1"}}],
    ("trt-rtx", False): [{"NvTensorRtRtx": {"enable_cuda_graph": "0"}}],
    ("onnx-standard", False): [],
    ("openvino", False): [{"OpenVINO": {
        "device_type": "CPU", "load_config": '{"CPU": {"INFERENCE_PRECISION_HINT": "f32"}}'}}],
    ("qnn", False): [{"QNN": {"backend_type": "htp", "enable_htp_fp16_precision": "1",
                              "soc_model": "60", "htp_arch": "73"}}],
}

#: genai provider names (after its NormalizeProviderName) for the packages' error messages.
GENAI_PROVIDER_ERRORS = {"cuda": "Cuda", "dml": "DML", "webgpu": "WebGPU",
                         "NvTensorRtRtx": "Cuda", "OpenVINO": "OpenVINO", "QNN": "QNN"}


@pytest.mark.parametrize("ep,shared", sorted(EXPECTED))
def test_provider_options_table(ep, shared):
    assert genai_provider_options(get_ep(ep), shared) == EXPECTED[ep, shared]


def test_openvino_options_follow_the_build_dtype_and_quantization():
    f16 = genai_provider_options(get_ep("openvino"), False, dtype=ir.DataType.FLOAT16,
                                 quantized=True)
    assert f16 == [{"OpenVINO": {"device_type": "CPU", "load_config": json.dumps(
        {"CPU": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0", "INFERENCE_PRECISION_HINT": "f32"}})}}]


def test_graph_capture_only_with_shared_kv_buffers():
    for (ep, shared), options in EXPECTED.items():
        if graph_capture_enabled(options):
            assert shared, (ep, options)
    assert graph_capture_enabled(EXPECTED["trt-rtx", True])
    assert not graph_capture_enabled(EXPECTED["trt-rtx", False])


def test_declared_options_are_kept_and_not_aliased():
    caps = EpCapabilities(name="x", provider_options={"cuda": {"device_id": "1"}})
    options = genai_provider_options(caps, True)
    assert options == [{"cuda": {"device_id": "1"}}]
    options[0]["cuda"]["device_id"] = "2"
    assert caps.provider_options["cuda"]["device_id"] == "1"


def test_capture_requested_on_cuda_and_webgpu():
    for name, key in (("cuda", "enable_cuda_graph"), ("webgpu", "enableGraphCapture")):
        caps = EpCapabilities(name="x", provider_options={name: {}}, enable_graph_capture=True,
                              graph_capture_option=key)
        assert genai_provider_options(caps, True) == [{name: {key: "1"}}]
        assert genai_provider_options(caps, False) == [{name: {key: "0"}}]


def test_a_registered_ep_declares_its_own_capture_option(monkeypatch):
    """An out-of-tree EP (register_ep) needs no table here: its capabilities name the option."""
    caps = EpCapabilities(name="x-capture", provider_options={"XProvider": {}},
                          enable_graph_capture=True, graph_capture_option="x_capture")
    monkeypatch.setattr(ep_registry, "_eps", {**ep_registry._eps})
    register_ep(caps)
    shared = genai_provider_options(caps, True)
    assert shared == [{"XProvider": {"x_capture": "1"}}]
    assert graph_capture_enabled(shared)
    assert not graph_capture_enabled(genai_provider_options(caps, False))


@pytest.mark.parametrize("caps", list(ep_registry), ids=lambda caps: caps.name)
def test_every_ep_gets_its_declared_providers(caps):
    """Any EP, in the table or not (a new one), gets exactly the providers it declares, each
    with at least its declared options (capture and dtype options come on top)."""
    for shared in (True, False):
        options = genai_provider_options(caps, shared)
        assert [next(iter(o)) for o in options] == list(caps.provider_options)
        for option in options:
            (name, got), = option.items()
            assert set(caps.provider_options[name]) <= set(got), (caps.name, got)


# -- built packages ------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt") / "tiny-llama"))


BUILDS = [(caps.name, SHORT_NAMES[d]) for caps in ep_registry for d in sorted(caps.dtypes)]


@pytest.mark.parametrize("ep,dtype", BUILDS, ids=[f"{e}-{d}" for e, d in BUILDS])
def test_built_genai_config(checkpoint, ep, dtype):
    package = mobius.build(checkpoint, execution_provider=ep, dtype=dtype)
    uses_gqa = any(n.domain == "com.microsoft" and n.op_type == "GroupQueryAttention"
                   for n in package.model.graph)
    search = package.genai_config["search"]
    session = package.genai_config["model"]["decoder"]["session_options"]
    assert search["past_present_share_buffer"] is uses_gqa
    assert uses_gqa == get_ep(ep).fuses_gqa(package_dtype(dtype))
    # the build's dtype reaches the EP's precision options (openvino's hint)
    expected = genai_provider_options(get_ep(ep), uses_gqa, dtype=package_dtype(dtype))
    assert session["provider_options"] == expected
    if dtype == "f32" and any(e == ep for e, _ in EXPECTED):  # a new EP: its declared ones
        assert expected == EXPECTED[ep, uses_gqa]


def package_dtype(name):
    from mobius.weights.dtypes import parse_dtype

    return parse_dtype(name)


@pytest.fixture(scope="module")
def saved(checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("packages")
    out = {}
    for caps in ep_registry:
        dtype = "f16" if caps.fuses_gqa(package_dtype("f16")) else "f32"
        out[caps.name] = mobius.build(checkpoint, execution_provider=caps.name,
                                      dtype=dtype).save(str(root / caps.name))
    return out


@pytest.mark.parametrize("ep", ep_registry.names())
def test_onnxruntime_genai_reads_the_provider(saved, ep):
    """genai parses every package's config and recognises its provider by name.

    This machine's onnxruntime-genai is the CPU build: packages for cpu-only
    targets load; for a GPU EP genai must fail *because the provider is not in
    this build*, never with "Unknown provider name" or a config parse error.
    """
    import onnxruntime_genai as og
    with open(os.path.join(saved[ep], "genai_config.json")) as f:
        providers = [name for entry in json.load(f)["model"]["decoder"]["session_options"]
                     ["provider_options"] for name in entry]
    config = og.Config(saved[ep])
    if not providers:
        og.Model(config)  # runs on the CPU build
        return
    with pytest.raises(Exception) as info:
        og.Model(config)
    message = str(info.value)
    assert "Unknown provider" not in message and "Error encountered while parsing" not in message
    assert GENAI_PROVIDER_ERRORS[providers[0]] in message, message
