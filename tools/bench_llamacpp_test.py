"""The llama.cpp benchmark's own logic, without llama.cpp: reading llama-bench's
jsonl, pooling rounds, ratios against the issue's targets, and the missing-tools error."""

from __future__ import annotations

import json

import pytest

from tools import bench_llamacpp as bl


def _record(n_prompt, n_gen, samples, threads=2):
    return json.dumps({"model_type": "llama ?B Q4_0", "n_threads": threads, "n_prompt": n_prompt,
                       "n_gen": n_gen, "n_depth": 0, "avg_ts": sum(samples) / len(samples),
                       "stddev_ts": 0.0, "samples_ts": samples})


def test_llama_bench_jsonl_gives_prefill_and_decode_and_skips_other_lines():
    text = "\n".join(["main: some log line", _record(128, 0, [400.0, 420.0]),
                      _record(0, 64, [30.0, 31.0]), _record(128, 64, [99.0])])
    got = bl.parse_llama_bench(text)
    assert got["prefill_tok_s"] == 410.0 and got["prefill_tok_s_all"] == [400.0, 420.0]
    assert got["decode_tok_s"] == 30.5 and got["threads"] == 2
    assert got["model_type"] == "llama ?B Q4_0"


def test_llama_bench_output_without_a_decode_record_is_an_error():
    with pytest.raises(ValueError, match="decode_tok_s"):
        bl.parse_llama_bench(_record(128, 0, [400.0]))


def test_pooled_takes_the_median_of_every_sample_of_every_round():
    runs = [{"prefill_tok_s_all": [1.0, 9.0], "decode_tok_s_all": [5.0]},
            {"prefill_tok_s_all": [3.0], "decode_tok_s_all": [6.0, 7.0]}]
    got = bl.pooled(runs)
    assert got["prefill_tok_s"] == 3.0 and got["prefill_tok_s_range"] == [1.0, 9.0]
    assert got["decode_tok_s"] == 6.0


def test_ratios_are_mobius_over_llama_cpp_and_size_is_an_upper_bound():
    r = bl.ratios({"prefill_tok_s": 200.0, "decode_tok_s": 33.0},
                  {"prefill_tok_s": 100.0, "decode_tok_s": 30.0}, 120, 100)
    assert r == {"prefill": 2.0, "decode": 1.1, "size": 1.2}
    assert bl.verdict(r) == {"prefill": True, "decode": True, "size": False}
    assert bl.verdict({"prefill": 0.99, "decode": 1.2, "size": 1.15}) == {
        "prefill": False, "decode": True, "size": True}


def test_pinning_uses_the_first_cores():
    assert bl.pinned(["x"], 1) == ["taskset", "-c", "0", "x"]
    assert bl.pinned(["x"], 4) == ["taskset", "-c", "0-3", "x"]


def test_missing_tools_say_how_to_build_them(tmp_path):
    with pytest.raises(SystemExit, match="setup_llamacpp.sh"):
        bl.find_tools(str(tmp_path))


def test_every_variant_compares_with_a_gguf_type_llama_quantize_knows():
    assert {kind for _, kind in bl.VARIANTS.values()} <= {"F32", "F16", "Q8_0", "Q4_0"}
