"""onnxruntime-node and onnxruntime-web (WebAssembly, in Node) run mobius packages.

Every decoder family's f32 package for the cpu and default EPs, and the every-dtype cohort's
for webgpu (the EP suites' builds: under Bazel //ep:suite_builds made them once,
testing/ep_suite.Builds);
onnxruntime-node replays Python onnxruntime's prefill + cached decode steps and
must give the same logits within 1e-5. onnxruntime-web's WebAssembly backend
does the same for the webgpu and onnx-standard packages.

The cases this shard selected are replayed by one Node process (see
decoder_runner.mjs): starting a runtime costs more than replaying a tiny model.
"""

import json
import os

import onnx_ir as ir
import pytest

from testing import ep_suite
from testing.js.decoder_cases import write_decoder_case
from testing.js.node import run_node

TOLERANCE = 1e-5
NODE_EPS = ("cpu", "default", "webgpu")
WEB_EPS = ("webgpu", "onnx-standard")


def _params(eps, backend):
    """Every decoder family whose f32 package the EP suites build for the EP (webgpu's primary
    dtype is f16: its f32 packages are the every-dtype cohort's, ep_suite.family_dtypes)."""
    return [pytest.param(fam, ep, backend, id=f"{fam}-{ep}", marks=pytest.mark.shard_group(fam))
            for fam in ep_suite.decoder_family_names() for ep in eps
            if "f32" in ep_suite.family_dtypes(ep, fam)]


@pytest.fixture(scope="module")
def replayed(request, tmp_path_factory):
    """(family, ep, backend) -> the runner's result, for every case selected in this module."""
    wanted = [tuple(item.callspec.params[k] for k in ("family", "ep", "backend"))
              for item in request.session.items if item.module is request.module]
    root = tmp_path_factory.mktemp("js")
    builds = ep_suite.Builds(ep_suite.Checkpoints(root / "ckpt"))
    cases = {}
    for family, ep, _ in wanted:
        if (family, ep) not in cases:
            model = root / "pkg" / family / ep / "model.onnx"
            model.parent.mkdir(parents=True)
            ir.save(builds.get(family, ep, "f32").model, model,  # the package's file layout
                    external_data="model.onnx.data")
            case = os.path.join(root, "case", family, ep)
            cases[family, ep] = write_decoder_case(str(model), case)
    jobs = root / "jobs.json"
    jobs.write_text(json.dumps([{"case": cases[f, e], "backend": b} for f, e, b in wanted]))
    results = run_node("decoder_runner.mjs", str(jobs), timeout=600)["results"]
    return dict(zip(wanted, results))


def _check(result):
    assert "error" not in result, result["error"]
    steps = result["steps"]
    assert len(steps) == 4 and max(steps) <= TOLERANCE, steps


@pytest.mark.parametrize("family,ep,backend", _params(NODE_EPS, "node"))
def test_onnxruntime_node_matches_python(replayed, family, ep, backend):
    _check(replayed[family, ep, backend])


@pytest.mark.parametrize("family,ep,backend", _params(WEB_EPS, "web"))
def test_onnxruntime_web_wasm_matches_python(replayed, family, ep, backend):
    _check(replayed[family, ep, backend])
