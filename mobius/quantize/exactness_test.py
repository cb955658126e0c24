"""Exactness: a checkpoint whose Linear weights lie on the quantization grid builds,
quantized, into logits equal to the float build's.

Every 2-D weight is block-wise ``scale * (code - zero_point)`` with codes that
reach both ends of the grid in each block, so RTN must recover it exactly; at
accuracy level 1 (f32 compute) the int4 logits then match the f32 build within
1e-5 of the logit scale. Run for every EP whose f32 graph runs on onnxruntime's
CPU EP, block sizes 32 and 128 (where the EP takes them), symmetric and
asymmetric (where it takes zero points), with the embedding table quantized
too (GatherBlockQuantized / DequantizeLinear + Gather; block 128 does not
divide tiny-llama's hidden size 64, so there the table stays float). This
pins packing, scales, zero points and layout for every graph form.
"""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from safetensors.numpy import load_file, save_file

import mobius
from mobius.ep.registry import ep_registry
from mobius.tiny.checkpoint import make_tiny_checkpoint
from testing import ep_parity, parity
from testing.quant_grid import on_grid

CASES = [(caps.name, block, symmetric)
         for caps in ep_registry if ir.DataType.FLOAT in caps.dtypes and 4 in caps.quant_bits
         and ep_parity.cpu_runnable(caps.name, "f32")
         for block in (32, 128) if block in caps.quant_block_sizes
         for symmetric in (True, False) if symmetric or caps.quant_zero_points]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(block: int, symmetric: bool) -> str:
        key = (block, symmetric)
        if key not in made:
            folder = str(tmp_path_factory.mktemp(f"grid{block}{'s' if symmetric else 'a'}"))
            make_tiny_checkpoint("tiny-llama", folder)
            path = f"{folder}/model.safetensors"
            tensors = load_file(path)
            rng = np.random.default_rng(block + symmetric)
            for name, array in tensors.items():
                if array.ndim == 2:
                    tensors[name] = on_grid(array.shape, block, symmetric, rng)
            save_file(tensors, path)
            made[key] = folder
        return made[key]

    return get


def _logits(package, steps: int = 2) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    # ORT turns DequantizeLinear + MatMul into MatMulNBits at accuracy level 4 unless told.
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    proto = ir.serde.serialize_model(package.models["model"])
    sess = ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    config = package.config
    input_ids, mask = parity.make_batch(config.vocab_size, 6, 0, 0)
    tokens = [np.array([[5], [9]], np.int64), np.array([[17], [3]], np.int64)]
    run, _ = ep_parity.run(sess, config, input_ids, mask, steps, np.float32, tokens=tokens)
    return run.logits


@pytest.mark.parametrize("ep,block,symmetric", CASES)
def test_int4_on_grid_matches_f32(checkpoints, ep, block, symmetric):
    folder = checkpoints(block, symmetric)
    every_position = {"prefill_logits": "all"}  # every prompt position's logits compared
    reference = _logits(mobius.build(folder, execution_provider=ep, **every_position))
    quantized = mobius.build(folder, execution_provider=ep, quant="int4", quant_block_size=block,
                             quant_symmetric=symmetric, quant_accuracy_level=1,
                             quant_embedding=True, **every_position)
    graph = quantized.models["model"].graph
    assert not any(n.op_type == "MatMul" and n.inputs[1].is_initializer() for n in graph), \
        "a Linear was left float"
    float_tables = [n for n in graph if n.op_type == "Gather" and n.inputs[0].is_initializer()
                    and n.inputs[1].name == "input_ids"]
    assert len(float_tables) == (block > quantized.config.hidden_size)  # H % block: stays float
    scale = max(float(np.abs(r).max()) for r in reference)
    for ref, got in zip(reference, _logits(quantized)):
        assert np.abs(got - ref).max() <= 1e-5 * scale, (ep, block, symmetric)
