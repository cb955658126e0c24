"""--adapter-mode separate: LoRA adapters as files that onnxruntime-genai switches
at run time, against transformers + peft (adapter on, adapter off, switching), recorded at
build time with the adapters peft saved (lora_adapter_cases.py)."""

import json
import os

import numpy as np
import pytest

from mobius.builder import build
from mobius.cli import main
from mobius.errors import MobiusError, WeightsError
from mobius.package.adapter_files import adapter_path
from mobius.weights import lora_adapter_cases as cases
from testing import decoder_reference
from testing.model_runs import BuiltPackage, f32_parity, ort_session
from testing.reference_cases import case_dir

PROMPT = cases.PROMPT


def _recorded(name: str) -> str:
    """A folder or file of lora_adapter_cases (its module docstring)."""
    return os.path.join(case_dir(cases, "peft"), name)


@pytest.fixture(scope="module")
def setup():
    return _recorded("base"), {name: _recorded(name) for name in cases.ADAPTERS}


def _reference(adapter: str | None, pad: int) -> decoder_reference.DecoderReference:
    """transformers + peft's recorded run with ``adapter`` (a name; None: the base model)."""
    return decoder_reference.load(_recorded(cases.run_name(adapter, pad) + ".npz"))


class _WithAdapter:
    """An onnxruntime session that runs with one adapter file active (RunOptions)."""

    def __init__(self, session, path: str | None):
        import onnxruntime as ort

        self.session, self.options = session, ort.RunOptions()
        if path is not None:
            adapter = ort.LoraAdapter()
            adapter.Load(path)
            self.options.add_active_adapter(adapter)
            self._adapter = adapter  # kept alive while the options refer to it

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feeds):
        return self.session.run(names, feeds, self.options)


# cpu: GroupQueryAttention, which (like genai) expects right padding: no left-padded row
@pytest.mark.parametrize("ep,pad", [("cpu", 0), ("default", 3)])
def test_logits_match_peft_with_each_adapter_and_without(tmp_path, setup, ep, pad):
    base, adapters = setup
    package = build(base, execution_provider=ep, adapter=list(adapters.values()),
                    adapter_mode="separate", prefill_logits="all")  # every position compared
    path = package.save(str(tmp_path / "pkg"))
    assert sorted(os.listdir(os.path.join(path, "adapters"))) == [
        "alpha.onnx_adapter", "beta.onnx_adapter"]
    built, session = BuiltPackage(path, package.config, "f32"), ort_session(
        os.path.join(path, "model.onnx"))
    for name in [None, *adapters]:
        file = adapter_path(path, name) if name else None
        run = f32_parity(built, _reference(name, pad), session=_WithAdapter(session, file))
        assert run.max_abs_diff <= 1e-4, (name, run.max_abs_diff)
    # the adapter matters: with it on, the base model is far off
    run = f32_parity(built, _reference(None, pad),
                     session=_WithAdapter(session, adapter_path(path, "alpha")))
    assert run.max_abs_diff > 1e-2


def _genai_tokens(model, adapters, name: str | None) -> list[int]:
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + cases.NEW_TOKENS,
                              min_length=len(PROMPT) + cases.NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
    if name is not None:
        generator.set_active_adapter(adapters, name)
    generator.append_tokens(np.array([PROMPT], np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(PROMPT):]


def test_genai_switches_adapters_at_run_time(tmp_path, setup):
    import onnxruntime_genai as og

    base, adapters = setup
    path = str(tmp_path / "pkg")
    named = [arg for name, folder in adapters.items() for arg in ("--adapter", f"{name}={folder}")]
    assert main(["build", "--model", base, path, "--ep", "cpu", "--adapter-mode", "separate",
                 *named, "--quiet"]) == 0
    with open(_recorded("tokens.json")) as f:  # transformers + peft's greedy tokens
        recorded = json.load(f)
    expected = {name: recorded[name or "base"] for name in [None, *adapters]}
    assert len({tuple(tokens) for tokens in expected.values()}) == 3  # each adapter matters
    model = og.Model(path)
    loaded = og.Adapters(model)
    for name in adapters:
        loaded.load(adapter_path(path, name), name)
    for name in ["alpha", "beta", None, "alpha"]:  # one model, adapters switched per generator
        assert _genai_tokens(model, loaded, name) == expected[name], name


def test_bad_requests_are_refused(tmp_path, setup):
    base, adapters = setup
    with pytest.raises(MobiusError, match="cannot all be merged"):
        build(base, adapter=list(adapters.values()))
    with pytest.raises(WeightsError, match="share a name"):
        build(base, adapter=[f"x={adapters['alpha']}", f"x={adapters['beta']}"],
              adapter_mode="separate")
    with pytest.raises(MobiusError, match="adapter mode 'both'"):
        build(base, adapter=adapters["alpha"], adapter_mode="both")
    with pytest.raises(MobiusError, match="EP 'webgpu' builds concrete shapes"):
        build(base, execution_provider="webgpu", adapter=adapters["alpha"],
              adapter_mode="separate")
    with pytest.raises(MobiusError, match="genai layout"):
        build(base, execution_provider="webgpu", adapter=adapters["alpha"],
              adapter_mode="separate", layout="transformers.js")


def test_a_fused_projection_is_refused():
    base, adapter = _recorded("phi3"), _recorded("phi3-adapter")  # tiny-phi3, on qkv_proj
    with pytest.raises(WeightsError, match="qkv_proj.weight.*fused or sliced"):
        build(base, adapter=adapter, adapter_mode="separate")
    assert build(base, adapter=adapter).model is not None  # merging it works
