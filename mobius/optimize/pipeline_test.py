"""optimize_model: the [EP Trace] lines, the summary table, the GQA-missing warning,
and role gating (GQA only ever fuses in decoders)."""

from __future__ import annotations

import dataclasses

import logging
import re
import warnings

import onnx_ir as ir
import pytest

import mobius
from mobius.optimize.pipeline import optimize_model
from mobius.optimize.trace import PREFIX

GQA = "com.microsoft::GroupQueryAttention"
STAGES = ["cleanup", "fuse", "inline", "lower", "fold"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt") / "tiny-llama"))


def generic_decoder(checkpoint) -> ir.Model:
    """A fresh generic (default-EP) decoder graph: standard Attention, no fusions."""
    model = mobius.build(checkpoint, execution_provider="default").model
    assert any(n.op_type == "Attention" for n in model.graph)
    return model


def histogram(model):
    from mobius.optimize.histogram import op_histogram

    return op_histogram(model)


def trace_lines(caplog) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "mobius.optimize"]
    assert all(line.startswith(PREFIX + " ") for line in lines), lines
    return [line[len(PREFIX) + 1:] for line in lines]


def optimize_traced(caplog, model, ep, dtype="f32", role="decoder"):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mobius.optimize"):
        report = optimize_model(model, ep, dtype, model_role=role, trace=True)
    return report, trace_lines(caplog)


# -- trace -----------------------------------------------------------------------------


def test_trace_header_names_target_dtype_and_role(caplog, checkpoint):
    _, lines = optimize_traced(caplog, generic_decoder(checkpoint), "cpu")
    assert lines[0] == "target=cpu dtype=f32 role=decoder"
    _, lines = optimize_traced(caplog, generic_decoder(checkpoint), "cuda", "f16")
    assert lines[0] == "target=cuda dtype=f16 role=decoder"


def test_trace_stage_lines_chain_node_counts(caplog, checkpoint):
    model = generic_decoder(checkpoint)
    before = model.graph.num_nodes()
    _, lines = optimize_traced(caplog, model, "cpu")
    stage_lines = [line for line in lines if line.startswith("stage ")]
    parsed = [re.fullmatch(r"stage (\w+): (\d+) -> (\d+) nodes", line) for line in stage_lines]
    assert all(parsed), stage_lines
    assert [m.group(1) for m in parsed] == STAGES  # fixed order, every stage reported
    counts = [(int(m.group(2)), int(m.group(3))) for m in parsed]
    assert counts[0][0] == before
    for (_, after), (next_before, _) in zip(counts, counts[1:]):
        assert after == next_before
    assert counts[-1][1] == model.graph.num_nodes()


def test_trace_rule_lines_report_op_deltas_or_no_matches(caplog, checkpoint):
    model = generic_decoder(checkpoint)
    report, lines = optimize_traced(caplog, model, "cpu")
    rule_lines = [line for line in lines if line.startswith("  ") and line[2] != " "]
    assert len(rule_lines) == len(report.records)  # one line per rule that ran
    delta = r"[+-]\d+ [\w.:]+"
    for line, record in zip(rule_lines, report.records):
        m = re.fullmatch(r"  (\w+)/(\w+): (.*)", line)
        assert m, line
        assert (m.group(1), m.group(2)) == (record.stage, record.rule)
        body = m.group(3)
        if body == "no matches":
            assert not record.added and not record.removed and not record.matched
        else:
            assert re.fullmatch(f"{delta}(, {delta})*", body), body
            for sign, count, op in re.findall(r"([+-])(\d+) ([\w.:]+)", body):
                side = record.added if sign == "+" else record.removed
                assert side[op] == int(count), (line, side)
    gqa_line = next(line for line in rule_lines if "GroupQueryAttentionFusion" in line)
    assert f"+2 {GQA}" in gqa_line and "-2 Attention" in gqa_line  # tiny-llama: 2 layers


def test_trace_names_where_each_rule_rewrote(caplog, checkpoint):
    """Under a rule's line: the nodes it rewrote at (and, had it turned a match down,
    "rejected NODE: reason"; see the rules' near-miss tests)."""
    report, lines = optimize_traced(caplog, generic_decoder(checkpoint), "cpu")
    at = lines.index(next(line for line in lines if "fuse/GroupQueryAttentionFusion" in line)) + 1
    record = next(r for r in report.records if r.rule == "GroupQueryAttentionFusion")
    assert len(record.sites) == 2 and all("layers." in site for site in record.sites)
    assert lines[at] == "    at " + ", ".join(record.sites)
    details = [line for line in lines if line.startswith("    ")]
    assert len(details) == sum(bool(r.sites) + min(len(r.rejections), 8) + (len(r.rejections) > 8)
                               for r in report.records)


def test_trace_ends_with_the_summary_table(caplog, checkpoint):
    report, lines = optimize_traced(caplog, generic_decoder(checkpoint), "cpu")
    header_at = next(i for i, line in enumerate(lines) if line.startswith("Rule "))
    table = lines[header_at:]
    assert re.sub(r"\s+", " ", table[0]).strip() == "Rule | Matched | +Nodes | -Nodes"
    assert set(table[1]) <= {"-", "+"}  # the separator row
    rows = [[cell.strip() for cell in row.split("|")] for row in table[2:]]
    assert len(rows) == len(report.records)
    for row, record in zip(rows, report.records):
        assert row == [f"{record.stage}/{record.rule}", str(record.matched),
                       str(sum(record.added.values())), str(sum(record.removed.values()))]
    gqa_row = next(row for row in rows if row[0] == "fuse/GroupQueryAttentionFusion")
    assert gqa_row[1] == "2"
    assert header_at == len(lines) - len(report.records) - 2  # nothing after the table


def test_no_trace_lines_unless_asked(caplog, checkpoint):
    with caplog.at_level(logging.DEBUG):
        optimize_model(generic_decoder(checkpoint), "cpu", "f32")
    assert not [r for r in caplog.records if PREFIX in r.getMessage()]


def test_build_trace_optimization_flag(caplog, checkpoint):
    with caplog.at_level(logging.INFO, logger="mobius.optimize"):
        mobius.build(checkpoint, execution_provider="webgpu", dtype="f16",
                     trace_optimization=True)
    lines = trace_lines(caplog)
    assert lines[0] == "target=webgpu dtype=f16 role=decoder"
    assert any(re.sub(r"\s+", " ", line).strip() == "Rule | Matched | +Nodes | -Nodes"
               for line in lines)


def test_cli_trace_flag(caplog, checkpoint, tmp_path):
    from mobius import cli

    with caplog.at_level(logging.INFO, logger="mobius.optimize"):
        assert cli.main(["build", "--model", checkpoint, str(tmp_path / "out"),
                         "--ep", "cpu", "--trace"]) == 0
    assert trace_lines(caplog)[0] == "target=cpu dtype=f32 role=decoder"


def test_report(checkpoint):
    report = optimize_model(generic_decoder(checkpoint), "cpu", "f32")
    assert (report.ep, report.dtype, report.role) == ("cpu", ir.DataType.FLOAT, "decoder")
    assert report.matched("GroupQueryAttentionFusion") == 2
    assert report.histogram[GQA] == 2
    assert [r.stage for r in report.records] == sorted(
        (r.stage for r in report.records), key=STAGES.index)


# -- the GQA-missing warning ------------------------------------------------------------


def unfusable(model: ir.Model) -> ir.Model:
    """Gives every Attention a logit softcap: GroupQueryAttentionFusion must refuse it.

    (A causal-flag Attention would do as well; both are outside the fused pattern,
    which takes an explicit additive mask and no softcap.)
    """
    for node in model.graph:
        if node.op_type == "Attention":
            node.attributes["softcap"] = ir.AttrFloat32("softcap", 50.0)
            node.attributes["is_causal"] = ir.AttrInt64("is_causal", 1)
    return model


def test_warns_when_gqa_expected_but_missing(checkpoint):
    model = unfusable(generic_decoder(checkpoint))
    with pytest.warns(UserWarning, match=r"GroupQueryAttention was expected for EP 'cpu' / f32 "
                                         r"but none was produced; 2 Attention node\(s\) remain"):
        optimize_model(model, "cpu", "f32")
    assert histogram(model)["Attention"] == 2
    assert GQA not in histogram(model)


def test_build_surfaces_the_warning(checkpoint, monkeypatch):
    """Through mobius.build too (warnings point at the caller, not at pipeline internals)."""
    from mobius.models.registry import family_for
    from mobius.tasks import causal_lm

    def build(module, config, flags):
        return {"model": unfusable(causal_lm.build_causal_lm(module, config, flags))}

    task = dataclasses.replace(causal_lm.TASK, build=build)
    monkeypatch.setattr("mobius.builder.family_for",
                        lambda raw: dataclasses.replace(family_for(raw), task=task))
    with pytest.warns(UserWarning, match="GroupQueryAttention was expected for EP 'cuda' / f16"):
        mobius.build(checkpoint, execution_provider="cuda", dtype="f16")


@pytest.mark.parametrize("ep,dtype,role", [
    ("cpu", "f32", "decoder"),  # fused: nothing to warn about
    ("default", "f32", "decoder"),  # GQA not expected on the portable target
    ("cuda", "f32", "decoder"),  # f32 is not a CUDA GQA dtype
    ("onnx-standard", "f16", "decoder"),
])
def test_no_warning_when_gqa_is_not_expected_or_present(checkpoint, ep, dtype, role):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimize_model(generic_decoder(checkpoint), ep, dtype, model_role=role)


@pytest.mark.parametrize("role", ["encoder", "vision", "embedding"])
def test_no_warning_for_non_decoder_roles(checkpoint, role):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimize_model(unfusable(generic_decoder(checkpoint)), "cpu", "f32", model_role=role)


# -- GQA never touches a non-decoder role ---------------------------------------------


@pytest.mark.parametrize("role", ["encoder", "vision", "embedding"])
@pytest.mark.parametrize("ep,dtype", [("cpu", "f32"), ("cuda", "f16"), ("webgpu", "f16"),
                                      ("mlx", "bf16"), ("dml", "f16"), ("trt-rtx", "f16")])
def test_gqa_never_fuses_outside_decoders(caplog, checkpoint, role, ep, dtype):
    model = generic_decoder(checkpoint)  # a decoder graph the fusion *would* match
    attention = histogram(model)["Attention"]
    report, lines = optimize_traced(caplog, model, ep, dtype, role)
    assert lines[0] == f"target={ep} dtype={dtype} role={role}"
    assert histogram(model)[GQA] == 0
    assert histogram(model)["Attention"] == attention
    assert report.matched("GroupQueryAttentionFusion") == 0
    assert not any("GroupQueryAttention" in line for line in lines)  # the rule did not even run


def test_same_graph_as_decoder_does_fuse(checkpoint):
    """Control for the test above: the very same graph fuses as a decoder."""
    model = generic_decoder(checkpoint)
    optimize_model(model, "cpu", "f32", model_role="decoder")
    assert histogram(model)[GQA] == 2


# -- argument validation --------------------------------------------------------------


def test_unknown_role_and_ep(checkpoint):
    model = generic_decoder(checkpoint)
    with pytest.raises(ValueError, match="unknown model role 'audio'"):
        optimize_model(model, "cpu", "f32", model_role="audio")
    with pytest.raises(ValueError, match="unknown execution provider 'tpu'"):
        optimize_model(model, "tpu", "f32")
