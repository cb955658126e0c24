"""The ``mixed`` method: which weights it keeps at int8, by role and layer, and that the
user's overrides and int8 builds are left as they were."""

import mobius
from mobius.ep.registry import get_ep
from mobius.quantize.rtn import MSE
from mobius.quantize.sensitive import more_bits, resolve_mixed, wide_weights
from mobius.quantize.spec import MIXED, resolve_quant
from mobius.tiny.checkpoint import make_tiny_checkpoint

LLAMA = [f"model.layers.{i}.{part}.weight" for i in range(8)
         for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                      "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
CPU = get_ep("cpu")
BERT = [f"encoder.layer.{i}.{part}.weight" for i in range(6)
        for part in ("attention.self.query", "attention.self.value", "attention.output.dense",
                     "intermediate.dense", "output.dense")]


def test_q4_k_m_layers_first_and_last_eighth_and_every_third():
    assert [i for i in range(30) if more_bits(i, 30)] == [
        0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
    assert [i for i in range(6) if more_bits(i, 6)] == [2, 5]
    assert [i for i in range(12) if more_bits(i, 12)] == [0, 3, 6, 9, 10, 11]


def test_values_everywhere_downs_in_chosen_layers():
    wide = wide_weights(LLAMA)
    assert {w for w in wide if w.endswith("v_proj")} == {
        f"model.layers.{i}.self_attn.v_proj" for i in range(8)}
    assert {w for w in wide if w.endswith("down_proj")} == {
        f"model.layers.{i}.mlp.down_proj" for i in range(8) if more_bits(i, 8)}
    assert len(wide) == 8 + sum(more_bits(i, 8) for i in range(8))


def test_bert_ffn_output_is_a_down_projection_its_attention_output_is_not():
    wide = wide_weights(BERT)
    assert "encoder.layer.5.output.dense" in wide and "encoder.layer.2.output.dense" in wide
    assert "encoder.layer.4.output.dense" not in wide
    assert not any("attention.output" in w or "query" in w or "intermediate" in w for w in wide)
    assert sum("attention.self.value" in w for w in wide) == 6


def test_each_stack_counts_its_own_layers():
    # a vision tower of 3 layers beside a text stack of 16: Q4_K_M's rule per stack
    names = [f"vision.blocks.{i}.mlp.fc2.weight" for i in range(3)]
    names += [f"model.layers.{i}.mlp.down_proj.weight" for i in range(16)]
    wide = wide_weights(names)
    assert {w for w in wide if w.startswith("vision")} == {
        f"vision.blocks.{i}.mlp.fc2" for i in range(3) if more_bits(i, 3)}
    assert {w for w in wide if w.startswith("model")} == {
        f"model.layers.{i}.mlp.down_proj" for i in range(16) if more_bits(i, 16)}


def test_resolved_spec_reads_int8_for_wide_weights_and_user_overrides_win():
    spec = resolve_quant(get_ep("cpu"), "int4", method=MIXED,
                         overrides="layers.0.self_attn.v_proj=float")
    plain = resolve_mixed(spec, LLAMA, CPU)
    assert plain.method == MSE
    assert plain.bits_for("model.layers.0.self_attn.v_proj.weight") is None  # user's wins
    assert plain.bits_for("model.layers.1.self_attn.v_proj.weight") == 8
    assert plain.bits_for("model.layers.0.mlp.down_proj.weight") == 8
    assert plain.bits_for("model.layers.1.mlp.down_proj.weight") == 4
    assert plain.bits_for("model.layers.1.self_attn.q_proj.weight") == 4


def test_other_methods_and_int8_builds_unchanged():
    mse = resolve_quant(get_ep("cpu"), "int4", method=MSE)
    assert resolve_mixed(mse, LLAMA, CPU) is mse
    int8 = resolve_mixed(resolve_quant(CPU, "int8", method=MIXED), LLAMA, CPU)
    assert int8.overrides == () and int8.method == MSE
    assert resolve_mixed(None, LLAMA, CPU) is None
    trt = get_ep("trt-rtx")  # takes int4 weights only
    int4_only = resolve_mixed(resolve_quant(trt, "int4", method=MIXED), LLAMA, trt)
    assert int4_only.overrides == () and int4_only.method == MSE


def test_default_int4_build_keeps_chosen_down_projections_at_int8(tmp_path):
    """The cpu default is ``mixed``: of a tiny 2-layer Llama, the last layer's down
    projection comes out as 8-bit MatMulNBits, every other projection 4-bit (its
    q/k/v are packed into one matrix on cpu, which stays int4)."""
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    graph = mobius.build(folder, execution_provider="cpu", quant="int4").model.graph
    bits = {n.inputs[1].name: n.attributes["bits"].value for n in graph
            if n.op_type == "MatMulNBits"}
    assert bits.pop("model.layers.1.mlp.down_proj_Q") == 8
    assert bits and set(bits.values()) == {4}
