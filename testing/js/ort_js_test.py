"""onnxruntime-node and onnxruntime-web (WebAssembly, in Node) run mobius packages.

Every decoder family is built for the cpu, default and webgpu EPs;
onnxruntime-node replays Python onnxruntime's prefill + cached decode steps and
must give the same logits within 1e-5. onnxruntime-web's WebAssembly backend
does the same for the webgpu and onnx-standard packages.
"""

import os

import pytest

from mobius.builder import build
from testing import ep_suite
from testing.js.decoder_cases import write_decoder_case
from testing.js.node import run_node

TOLERANCE = 1e-5
NODE_EPS = ("cpu", "default", "webgpu")
WEB_EPS = ("webgpu", "onnx-standard")


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """(family, ep) -> case.json of its f32 package, built once per module."""
    root = tmp_path_factory.mktemp("js")
    checkpoints = ep_suite.Checkpoints(root / "ckpt")
    made = {}

    def get(family: str, ep: str) -> str:
        if (family, ep) not in made:
            out = os.path.join(root, "pkg", family, ep)
            build(checkpoints.folder(family), execution_provider=ep, dtype="f32").save(out)
            made[family, ep] = write_decoder_case(os.path.join(out, "model.onnx"),
                                                  os.path.join(root, "case", family, ep))
        return made[family, ep]

    return get


def _params(eps):
    return [pytest.param(fam, ep, id=f"{fam}-{ep}", marks=pytest.mark.shard_group(fam))
            for fam in ep_suite.decoder_family_names() for ep in eps]


@pytest.mark.parametrize("family,ep", _params(NODE_EPS))
def test_onnxruntime_node_matches_python(cases, family, ep):
    steps = run_node("decoder_runner.mjs", cases(family, ep), "node")["steps"]
    assert len(steps) == 4 and max(steps) <= TOLERANCE, steps


@pytest.mark.parametrize("family,ep", _params(WEB_EPS))
def test_onnxruntime_web_wasm_matches_python(cases, family, ep):
    steps = run_node("decoder_runner.mjs", cases(family, ep), "web")["steps"]
    assert len(steps) == 4 and max(steps) <= TOLERANCE, steps
