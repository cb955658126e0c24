"""L1: every registered family builds from a transformers-made tiny checkpoint in f32,
f16 and bf16, the saved model passes the full ONNX checker (with strict shape
inference), and its graph I/O is exactly DESIGN.md's contract.

The builds are the default EP suite's (testing/ep_suite.Builds): under Bazel the
``ep_builds`` action made them once for //ep/default's targets and this one, so the
contract is checked on the very bytes those suites test; under plain pytest they are
built here.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_ir
import pytest

from mobius.models.registry import FAMILIES
from mobius.roles import DECODER
from testing.ep_suite import Builds, Checkpoints

DTYPES = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16,
          "bf16": onnx.TensorProto.BFLOAT16}


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Builds:
    """The default EP's builds of every family's tiny preset (prebuilt under Bazel)."""
    return Builds(Checkpoints(tmp_path_factory.mktemp("checkpoints")))


def _dims(value_info) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value_info.type.tensor_type.shape.dim]


def _elem(value_info) -> int:
    return value_info.type.tensor_type.elem_type


def test_every_family_has_a_tiny_preset():
    assert len(FAMILIES) >= 4
    for family in FAMILIES:
        assert family.tiny_preset, family.name


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_builds_and_passes_the_full_checker(family, dtype, builds):
    """Every model of the package: full checker + strict shape inference, graph I/O
    exactly the task's contract (Task.io), weights in the dtype."""
    assert family.tiny_preset, f"{family.name} has no tiny preset to test with"
    built = builds.get(family.name, "default", dtype)
    contract = _contract(family, built.config)
    assert set(built.serialized) | set(built.package.models) == set(contract)  # files
    for key, io in contract.items():
        data = built.onnx_bytes(key)
        onnx.checker.check_model(data, full_check=True)
        model = onnx.ModelProto.FromString(data)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        assert len(inferred.graph.output) == len(model.graph.output)
        _check_contract(key, model.graph, io, DTYPES[dtype])
        _check_weight_dtypes(model.graph, dtype, largest=family.task.roles[key] == DECODER)


def _contract(family, config):
    from mobius.context import build_context

    with build_context(None, onnx_ir.DataType.FLOAT):
        module = family.module(config)
    return family.task.io(module, config)


def _check_contract(key, graph, io, float_type):
    """Names and order, element types and dims, as Task.io declares them."""
    names = {v.name for v in graph.input}
    inputs = [s for s in io.inputs if not s.optional or s.name in names]
    for kind, specs, values in (("input", inputs, graph.input),
                                ("output", io.outputs, graph.output)):
        assert [v.name for v in values] == [s.name for s in specs], (key, kind)
        for spec, value in zip(specs, values):
            want = float_type if spec.dtype is None else int(spec.dtype)
            assert _elem(value) == want, (key, value.name)
            assert _dims(value) == list(spec.dims), (key, value.name)


#: Weights transformers keeps in float32 whatever the model dtype
#: (_keep_in_fp32_modules_strict), used by float32 routing: DeepSeek-V3's router bias;
#: LFM2-MoE's expert_bias, which only float32 routing reads.
FLOAT32_WEIGHTS = (".e_score_correction_bias", ".expert_bias")
#: Constants folded inside a Mamba2 mixer, whose scan and gated norm compute in float32
#: in every build dtype (mobius/components/mamba2.py), from A_log, dt_bias, D, norm weight.
FLOAT32_SCOPES = (".mamba.",
                  # Mamba2's and Nemotron-H's layers name their mixer "mixer" (Nemotron-H's
                  # attention and MLP layers too: their weights are checked by the other dtypes)
                  ".mixer.",
                  # likewise a gated DeltaNet layer's delta rule and gated norm (A_log, dt_bias,
                  # norm weight: mobius/components/gated_delta_net.py), as transformers computes them
                  ".linear_attn.",
                  # SigLIP2 NaFlex's position-resize weights, float32 as in transformers
                  "vision_tower.embeddings.Range")


def _check_weight_dtypes(graph, dtype, largest: bool):
    """Weights are stored in the build dtype.

    Exception: where the EP has no kernels for the dtype (bf16 on the default EP),
    the Float32Compute lowering casts weights to float32 where they enter, and
    constant folding turns the casts of small weights into float32 initializers;
    in a decoder (``largest``) the largest one (the embedding table) must still be
    in the build dtype (a tiny encoder may have none too large to fold).
    """
    from mobius.ep.registry import get_ep
    from mobius.weights.dtypes import parse_dtype

    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    weights = [i for i in graph.initializer if i.data_type in float_types
               and not i.name.endswith(FLOAT32_WEIGHTS)
               and not any(scope in i.name for scope in FLOAT32_SCOPES)]
    stray = sorted(i.name for i in weights if i.data_type != DTYPES[dtype])
    if get_ep("default").computes(parse_dtype(dtype)):
        assert not stray, f"initializers not in {dtype}: {stray[:5]}"
        return
    assert all(name.endswith("_float32") for name in stray), stray[:5]
    if largest:
        heaviest = max(weights, key=lambda i: int(np.prod(i.dims)))
        assert heaviest.data_type == DTYPES[dtype], f"{heaviest.name} is not stored in {dtype}"


def test_unknown_model_type_lists_the_supported_ones():
    from mobius.errors import UnsupportedModelError
    from mobius.models.registry import family_for, supported_model_types

    with pytest.raises(UnsupportedModelError) as info:
        family_for({"model_type": "not-a-model", "architectures": ["NopeForCausalLM"]})
    message = str(info.value)
    assert "'not-a-model'" in message
    for model_type in supported_model_types():
        assert re.search(rf"\b{re.escape(model_type)}\b", message)
