"""CheckpointLayoutMatMul: MatMul on a transposed checkpoint weight -> FusedMatMul(transB=1)
on the weight as the checkpoint stores it, saved without a transpose."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper
from onnxscript import nn

from mobius.components.linear import Linear, split_fused
from mobius.rewrite.checkpoint_layout_matmul import CheckpointLayoutMatMul
from mobius.rewrite.pack_qkv import concat_loader, lazy_initializer
from mobius.weights.attach import attach_weights
from mobius.weights.lora import LoraMergedCheckpoint
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors
from testing.fusion_checks import (FLOAT, apply_rule, check_model, copy_model, histogram, info,
                                   make_model, run_ort, weight)

#: this test's Bazel target, read by //tools:rewrite_rules (builds tiny-llama by name)
TEST_TARGET = {"tiny": ["tiny-llama"]}

H = 8
SIZES = {"q": 12, "k": 4, "v": 4}
RNG = np.random.default_rng(11)
TENSORS = {f"{n}.weight": RNG.standard_normal((out, H)).astype(np.float32)
           for n, out in SIZES.items()}
X = RNG.standard_normal((2, 3, H)).astype(np.float32)


class Projections(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (Linear(H, out) for out in SIZES.values())


def checkpoint(tmp_path) -> SafetensorsCheckpoint:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    write_safetensors(str(folder / "model.safetensors"), TENSORS)
    return SafetensorsCheckpoint(str(folder))


def bound_weights(source) -> dict[str, ir.TensorProtocol]:
    """The three projections' initializers, as attach_weights binds them ([in, out])."""
    module = Projections()
    attach_weights(module, source)
    return {name: getattr(module, name).weight.const_value for name in SIZES}


def model_on(tensors: dict[str, ir.TensorProtocol], shared: bool = False) -> ir.Model:
    """y_n = MatMul(x, W_n) for each weight given ([in, out] initializers)."""
    nodes = [helper.make_node("MatMul", ["x", name], [f"y_{name}"]) for name in tensors]
    outputs = [info(f"y_{name}", FLOAT, ["B", "S", t.shape[1]]) for name, t in tensors.items()]
    if shared:  # a second MatMul reads the first weight too
        first = next(iter(tensors))
        nodes.append(helper.make_node("MatMul", ["x", first], ["again"]))
        outputs.append(info("again", FLOAT, ["B", "S", tensors[first].shape[1]]))
    inits = [weight(name, t.numpy()) for name, t in tensors.items()]
    model = make_model(nodes, [info("x", TensorProto.FLOAT, ["B", "S", H])], outputs, inits)
    for name, tensor in tensors.items():  # the lazy checkpoint tensors, as a build has them
        model.graph.initializers[name].const_value = tensor
    return model


def saved_weights(model: ir.Model, folder) -> dict[str, np.ndarray]:
    """Saves the model with external data and reads every initializer back from the file."""
    path = os.path.join(folder, "model.onnx")
    ir.save(model, path, external_data="model.onnx.data")
    loaded = ir.load(path)
    return {name: v.const_value.numpy() for name, v in loaded.graph.initializers.items()}


def test_reads_the_checkpoint_layout_with_the_same_outputs_bit_for_bit(tmp_path):
    model = model_on(bound_weights(checkpoint(tmp_path)))
    before = run_ort(copy_model(model), {"x": X})
    assert apply_rule(CheckpointLayoutMatMul(), model, "cpu") == 3
    check_model(model)
    assert histogram(model) == {"com.microsoft::FusedMatMul": 3}
    for node in model.graph:
        assert node.attributes["transB"].as_int() == 1
    after = run_ort(model, {"x": X})
    for b, a in zip(before, after):  # the CPU EP packs B and B^T into the same buffer
        np.testing.assert_array_equal(a, b)
    saved = saved_weights(model, tmp_path)
    for name in SIZES:  # stored as the checkpoint stores it
        np.testing.assert_array_equal(saved[name], TENSORS[f"{name}.weight"])


def test_packed_qkv_is_saved_as_the_parts_rows_one_after_another(tmp_path):
    parts = bound_weights(checkpoint(tmp_path))
    model = model_on({"qkv": parts["q"]})  # a placeholder of the packed width, replaced below
    packed_width = sum(SIZES.values())
    graph = model.graph
    packed = lazy_initializer(graph, "qkv_packed", concat_loader(list(parts.values()), axis=1),
                              ir.DataType.FLOAT, [H, packed_width])
    node = next(iter(graph))
    node.replace_input_with(1, packed)
    graph.initializers.pop("qkv")
    graph.outputs[0].shape = ir.Shape(["B", "S", packed_width])
    expected = X @ np.concatenate([TENSORS[f"{n}.weight"] for n in SIZES]).T
    assert apply_rule(CheckpointLayoutMatMul(), model, "cpu") == 1
    assert list(packed.shape) == [packed_width, H]
    np.testing.assert_allclose(run_ort(model, {"x": X})[0], expected, rtol=1e-5, atol=1e-5)
    saved = saved_weights(model, tmp_path)
    np.testing.assert_array_equal(saved["qkv_packed"],
                                  np.concatenate([TENSORS[f"{n}.weight"] for n in SIZES]))


class FusedProjection(nn.Module):
    """q, k, v as row ranges of one fused checkpoint tensor (Phi-3's qkv_proj), with bias."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = split_fused(H, list(SIZES.values()), "qkv_proj", bias=True)


def test_parts_of_a_fused_projection_are_copied_as_row_ranges(tmp_path):
    fused = np.concatenate(list(TENSORS.values()))
    bias = RNG.standard_normal(len(fused)).astype(np.float32)
    folder = tmp_path / "fused"
    folder.mkdir()
    write_safetensors(str(folder / "model.safetensors"),
                      {"qkv_proj.weight": fused, "qkv_proj.bias": bias})
    module = FusedProjection()
    attach_weights(module, SafetensorsCheckpoint(str(folder)))
    tensors = {name: getattr(module, name).weight.const_value for name in SIZES}
    model = model_on(tensors)
    assert apply_rule(CheckpointLayoutMatMul(), model, "cpu") == 3
    saved = saved_weights(model, tmp_path)
    start = 0
    for name, rows in SIZES.items():
        np.testing.assert_array_equal(saved[name], fused[start:start + rows])
        part_bias = getattr(module, name).bias.const_value
        assert part_bias.copy_from is not None  # a byte range of the file, copied as stored
        np.testing.assert_array_equal(part_bias.numpy(), bias[start:start + rows])
        start += rows


def test_a_lora_merged_weight_keeps_its_delta(tmp_path):
    """A merged weight's bytes are not the base file's: it must not be copied from there."""
    base = checkpoint(tmp_path)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q"]}))
    a = RNG.standard_normal((2, H)).astype(np.float32)
    b = RNG.standard_normal((SIZES["q"], 2)).astype(np.float32)
    write_safetensors(str(adapter / "adapter_model.safetensors"),
                      {"base_model.model.q.lora_A.weight": a, "base_model.model.q.lora_B.weight": b})
    merged = LoraMergedCheckpoint(base, str(adapter))
    model = model_on(bound_weights(merged))
    assert apply_rule(CheckpointLayoutMatMul(), model, "cpu") == 3
    saved = saved_weights(model, tmp_path)
    np.testing.assert_allclose(saved["q"], TENSORS["q.weight"] + 2.0 * (b @ a), rtol=1e-6)
    np.testing.assert_array_equal(saved["k"], TENSORS["k.weight"])


def test_left_alone(tmp_path):
    tensors = bound_weights(checkpoint(tmp_path))
    # EPs that do not repack 2-D weights at load: the stored layout is the kernel's
    for ep in ("default", "cuda", "webgpu"):
        assert apply_rule(CheckpointLayoutMatMul(), model_on(tensors), ep) == 0
    # a weight read by a second MatMul stays shared; the others are rewritten
    shared = model_on(tensors, shared=True)
    assert apply_rule(CheckpointLayoutMatMul(), shared, "cpu") == 2
    assert histogram(shared) == {"MatMul": 2, "com.microsoft::FusedMatMul": 2}
    # values with no known checkpoint layout (computed, or plain arrays)
    plain = model_on({name: ir.Tensor(t.numpy(), name=name) for name, t in tensors.items()})
    assert apply_rule(CheckpointLayoutMatMul(), plain, "cpu") == 0


def test_a_cpu_package_stores_every_projection_as_the_checkpoint_does(tmp_path):
    """tiny-llama, cpu f32: no 2-D MatMul weight is left, and the saved q/k/v (packed),
    o, gate, up and down weights are the checkpoint's tensors byte for byte."""
    import mobius
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    folder = make_tiny_checkpoint("tiny-llama", folder=str(tmp_path / "tiny-llama"))
    pkg = mobius.build(folder, execution_provider="cpu", dtype="f32")
    graph = pkg.model.graph
    assert not [n.name for n in graph if n.op_type == "MatMul" and n.inputs[1].is_initializer()]
    saved = saved_weights(pkg.model, tmp_path)
    source = SafetensorsCheckpoint(folder)
    for layer in range(pkg.config.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        qkv = [source.read(f"{prefix}.self_attn.{p}_proj.weight") for p in "qkv"]
        np.testing.assert_array_equal(saved[f"{prefix}.self_attn.qkv_proj.weight"],
                                      np.concatenate(qkv))
        for name in ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            np.testing.assert_array_equal(saved[f"{prefix}.{name}.weight"],
                                          source.read(f"{prefix}.{name}.weight"))
