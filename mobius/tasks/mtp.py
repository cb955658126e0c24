"""Speculative decoding with a multi-token-prediction head (onnxruntime-genai's MtpGenerator).

The package gains the folder ``mtp/`` (the head, mobius/components/mtp_head.py, as
``mtp/model.onnx`` with its own genai_config.json: genai loads it as a second og.Model)
and a ``model.mtp`` section in the decoder's genai_config.json. genai drafts tokens with
the head and verifies them in one decoder run, so the decoder must give logits for every
position it is fed (prefill_logits "all") and its final normed hidden states as the output ``hidden_states``,
which the head reads. The head's graph contract, as genai's config names it:

inputs  input_ids [batch, seq], hidden_states [batch, seq, hidden],
        attention_mask [batch, total_seq], position_ids [batch, seq],
        past_key_values.0.key / .value [batch, kv_heads, past_seq, head_dim]
outputs logits [batch, seq, vocab], hidden_states_out [batch, seq, hidden],
        present.0.key / .value [batch, kv_heads, total_seq, head_dim]
"""

from __future__ import annotations

import copy

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.causal_lm import BATCH, INT64, OPSET, PAST, SEQ, TOTAL
from mobius.tasks.logits_to_keep import lm_head_input
from mobius.tasks.task import ModelIO, TensorSpec, add_inputs, add_outputs, new_graph

#: the head's folder in the package (its model.onnx and genai_config.json), its package key
#: and the decoder output the head reads
FOLDER, HIDDEN = "mtp", "hidden_states"
KEY = f"{FOLDER}/model"


def mtp_io(config: ArchitectureConfig) -> ModelIO:
    kv, head_dim, hidden = config.num_key_value_heads, config.head_dim, config.hidden_size
    cache = (kv, PAST, head_dim)
    return ModelIO(
        inputs=(TensorSpec("input_ids", INT64, (BATCH, SEQ)),
                TensorSpec(HIDDEN, None, (BATCH, SEQ, hidden)),
                TensorSpec("attention_mask", INT64, (BATCH, TOTAL)),
                TensorSpec("position_ids", INT64, (BATCH, SEQ)),
                TensorSpec("past_key_values.0.key", None, (BATCH, *cache)),
                TensorSpec("past_key_values.0.value", None, (BATCH, *cache))),
        outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)),
                 TensorSpec("hidden_states_out", None, (BATCH, SEQ, hidden)),
                 TensorSpec("present.0.key", None, (BATCH, kv, TOTAL, head_dim)),
                 TensorSpec("present.0.value", None, (BATCH, kv, TOTAL, head_dim))))


def build_mtp(head: nn.Module, config: ArchitectureConfig) -> ir.Model:
    """The head's generic graph (mobius/components/mtp_head.py's MtpHead)."""
    dtype = get_build_dtype()
    graph, builder = new_graph(OPSET)
    io = mtp_io(config)
    inputs = add_inputs(builder, io.inputs, dtype)
    values = head(builder.op, *(inputs[s.name] for s in io.inputs))
    add_outputs(builder, dict(zip((s.name for s in io.outputs), values)), io.outputs, dtype)
    return ir.Model(graph, ir_version=10, producer_name="mobius")


def expose_hidden_states(decoder: ir.Model, config: ArchitectureConfig) -> None:
    """Adds the decoder output ``hidden_states``: what its LM head reads (the final norm's
    output), which the head takes and genai hands over after each verification."""
    graph = decoder.graph
    hidden = lm_head_input(graph)
    if hidden.producer() is None:
        raise AssertionError("the LM head reads a graph input, not the decoder's states")
    node = ir.Node("", "Identity", [hidden], num_outputs=1)
    graph.insert_after(hidden.producer(), node)
    out = node.outputs[0]
    out.name = HIDDEN
    out.type = ir.TensorType(hidden.dtype)
    out.shape = ir.Shape([BATCH, SEQ, config.hidden_size])
    graph.outputs.append(out)


def mtp_genai_configs(genai_config: dict, config: ArchitectureConfig) -> dict:
    """Adds genai's ``model.mtp`` section and the decoder's hidden_states output to the
    package's genai_config; returns the head folder's own genai_config (MtpGenerator loads
    the head as a second og.Model: a one-layer decoder that takes hidden_states)."""
    model = genai_config["model"]
    model["decoder"]["outputs"][HIDDEN] = HIDDEN
    head_io = {
        "inputs": {"input_ids": "input_ids", HIDDEN: HIDDEN,
                   "attention_mask": "attention_mask", "position_ids": "position_ids",
                   "past_key_names": "past_key_values.%d.key",
                   "past_value_names": "past_key_values.%d.value"},
        "outputs": {"logits": "logits", HIDDEN: "hidden_states_out",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value"},
    }
    model["mtp"] = {"enabled": True, "filename": f"{FOLDER}/model.onnx", "num_hidden_layers": 1,
                    "num_key_value_heads": config.num_key_value_heads,
                    "head_size": config.head_dim, "main_hidden_states": HIDDEN, **head_io}
    head = copy.deepcopy(genai_config)
    del head["model"]["mtp"]
    head["model"]["decoder"].update(filename="model.onnx", num_hidden_layers=1, **head_io)
    head["model"]["decoder"].pop("layer_types", None)
    return head
