"""The generic runs the EP parity targets share (testing/generic_runs.py): a stored run is
bit for bit the run ep_parity would make in the test, its prefix is the shorter run, a
parity figure from it is the in-process one, and a run of other bytes, a missing case or a
failed run is an error, never a silent in-process rerun."""

from __future__ import annotations

import numpy as np
import pytest

from testing import ep_parity, ep_suite, ep_vlm_parity, generic_runs


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    return ep_suite.Builds(ep_suite.Checkpoints(tmp_path_factory.mktemp("checkpoints")))


@pytest.fixture(scope="module")
def generic(builds):
    return builds.get("llama", "default", "f32")


@pytest.fixture
def stored(generic, tmp_path, monkeypatch):
    """A store of llama/f32's left-padded CPU-EP run, as the action writes it."""
    root = str(tmp_path / "0")
    file = generic_runs.path(root, "llama", "f32", generic_runs.case("ort", 3))
    generic_runs.write(file, generic, "llama", generic_runs.case("ort", 3))
    monkeypatch.setattr(generic_runs, "roots", lambda: [root])
    return file


def _equal(a: ep_parity.Run, b: ep_parity.Run) -> bool:
    pairs = [(a.logits, b.logits), *zip(a.presents, b.presents), *zip(a.states, b.states)]
    return all(len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))
               for x, y in pairs) and len(a.presents) == len(b.presents)


@pytest.mark.parametrize("steps", [ep_parity.STEPS, 0])
def test_a_stored_run_is_the_run_made_in_the_test(generic, stored, steps):
    run, tokens = generic_runs.load(generic, "llama", "ort-pad3")
    run, tokens = ep_parity.truncate(run, tokens, steps)
    fresh, fresh_tokens = ep_parity.generic_run(generic.onnx_bytes(), generic.config, "f32",
                                                pad=3, steps=steps)
    assert len(fresh.logits) == steps + 1 and _equal(run, fresh)
    assert len(tokens) == steps and all(np.array_equal(a, b)
                                        for a, b in zip(tokens, fresh_tokens))


def test_a_parity_figure_from_the_stored_run_is_the_in_process_one(builds, generic, stored):
    built = builds.get("llama", "cpu", "f32")
    args = (built.onnx_bytes(), generic.onnx_bytes(), built.config, "f32")
    reference = generic_runs.load(generic, "llama", "ort-pad3")
    assert (ep_parity.ep_vs_generic(*args, pad=3, reference=reference)
            == ep_parity.ep_vs_generic(*args, pad=3))


def test_a_run_of_other_bytes_is_refused(builds, stored):
    other = builds.get("llama", "cpu", "f32")  # same family and dtype, other graph
    with pytest.raises(RuntimeError, match="other graphs"):
        generic_runs.load(other, "llama", "ort-pad3")


def test_a_case_the_action_did_not_run_is_an_error(generic, stored):
    with pytest.raises(KeyError, match="generic_runs.cases"):
        generic_runs.load(generic, "llama", "ort-pad0")


def test_a_failed_run_raises_its_own_message(generic, stored, tmp_path):
    with open(generic_runs.path(str(tmp_path / "0"), "llama", "f32", "ort-pad0") + ".error",
              "w") as f:
        f.write("RuntimeError: no session today\n")
    with pytest.raises(RuntimeError, match="no session today"):
        generic_runs.load(generic, "llama", "ort-pad0")


def test_every_parity_comparison_has_a_case():
    """The runs ep/parity_suite.py asks for, per EP: CPU-runnable dtypes unpadded and
    left-padded on onnxruntime, the others left-padded on onnx.reference, and the
    vision-language chains in the CPU-runnable dtypes."""
    cases = generic_runs.cases()
    for ep in ep_suite.EP_DTYPES:
        if ep == "default":
            continue
        for family, dtype in ep_suite.matrix(ep):
            wanted = ({"ort-pad0", "ort-pad3"} if ep_parity.cpu_runnable(ep, dtype)
                      else {"reference-pad3"})
            assert wanted <= cases[(family, dtype)], (ep, family, dtype)
        cpu_dtypes = [d for d in ep_suite.EP_DTYPES[ep] if ep_parity.cpu_runnable(ep, d)]
        for family, dtype in ep_vlm_parity.vlm_matrix(ep, cpu_dtypes):
            assert generic_runs.VISION_LANGUAGE in cases[(family, dtype)], (ep, family, dtype)


def test_a_stored_vision_language_run_is_the_run_made_in_the_test(builds, tmp_path,
                                                                   monkeypatch):
    generic = builds.get("llava", "default", "f32")
    root = str(tmp_path / "0")
    name = generic_runs.VISION_LANGUAGE
    generic_runs.write(generic_runs.path(root, "llava", "f32", name), generic, "llava", name)
    monkeypatch.setattr(generic_runs, "roots", lambda: [root])
    vision, audio, trace, ids = generic_runs.load(generic, "llava", name)
    fresh = ep_vlm_parity.generic_trace(generic, "llava")
    assert audio is None and fresh[1] is None
    for a, b in [*zip(vision.values(), fresh[0].values()), (ids, fresh[3]),
                 (trace.features, fresh[2].features),
                 *zip(trace.embeds + trace.logits + trace.tokens,
                      fresh[2].embeds + fresh[2].logits + fresh[2].tokens)]:
        assert np.array_equal(a, b)
    assert len(trace.logits) == len(fresh[2].logits) == ep_vlm_parity.STEPS + 1


@pytest.mark.parametrize("backend", ["ort", "reference"])
def test_a_graph_identical_to_the_generic_one_repeats_its_run(generic, backend):
    """Why ep_parity.same_graph may skip the EP side: running the same bytes on the
    generic run's tokens gives that run bit for bit."""
    model, config = generic.onnx_bytes(), generic.config
    reference, tokens = ep_parity.generic_run(model, config, "f32", pad=3, backend=backend)
    input_ids, mask = ep_parity.parity.make_batch(config.vocab_size, 10, 3, 0)
    make = ep_parity.session if backend == "ort" else ep_parity.ReferenceSession
    again, _ = ep_parity.run(make(model), config, input_ids, mask, ep_parity.STEPS, np.float32,
                             tokens=tokens)
    assert _equal(again, reference)
    diff = ep_parity.ep_vs_generic(model, model, config, "f32", pad=3, backend=backend)
    assert diff.logits == diff.present == 0.0 and ep_parity.same_graph(model, bytes(model))
