"""EpRegistry: lookup API, unknown names, register_ep, and how build() uses it."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re

import onnx_ir as ir
import pytest

import mobius
import mobius.builder
from mobius.ep import registry as registry_module
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import EpRegistry, ep_registry, get_ep, register_ep

#: modules of mobius/ep that are not EPs
_MACHINERY = {"__init__", "capabilities", "catalog", "contrib_ops", "registry"}


def _ep_files() -> list[str]:
    """The EP each file of mobius/ep declares (its CAPABILITIES.name), by file name: what the
    registry must discover, read from the folder rather than from the registry."""
    folder = os.path.dirname(os.path.abspath(registry_module.__file__))
    modules = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py"))
    return [importlib.import_module(f"mobius.ep.{m}").CAPABILITIES.name for m in modules
            if m not in _MACHINERY and not m.endswith(("_test", "_cases"))]


BUILTIN = _ep_files()


@pytest.fixture
def isolated_registry(monkeypatch):
    """A copy of the built-in registry that register_ep() writes to; discarded afterwards."""
    fresh = EpRegistry()
    for caps in ep_registry:
        fresh.register(caps)
    monkeypatch.setattr(registry_module, "ep_registry", fresh)
    return fresh


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A numpy-made tiny Llama checkpoint (no torch needed)."""
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt") / "tiny-llama"))


# -- lookup API ----------------------------------------------------------------


def test_builtin_names_in_order():
    assert ep_registry.names() == BUILTIN
    assert len(ep_registry) == len(BUILTIN)
    # the generic reference and the CPU EP every suite runs on are among them
    assert {"default", "cpu"} <= set(BUILTIN)


def test_iteration_yields_capabilities_in_registration_order():
    items = list(ep_registry)
    assert [c.name for c in items] == BUILTIN
    assert all(isinstance(c, EpCapabilities) for c in items)


def test_contains():
    for name in BUILTIN:
        assert name in ep_registry
    assert "tpu" not in ep_registry
    assert "CPU" not in ep_registry  # names are case-sensitive
    assert 3 not in ep_registry


def test_get_returns_none_for_unknown_and_require_raises():
    assert ep_registry.get("cuda").name == "cuda"
    assert ep_registry.get("tpu") is None
    with pytest.raises(ValueError) as info:
        ep_registry.require("tpu")
    message = str(info.value)
    assert "'tpu'" in message
    for name in BUILTIN:  # the error lists every registered name
        assert name in message


def test_get_ep_accepts_names_and_capabilities():
    cuda = get_ep("cuda")
    assert get_ep(cuda) is cuda
    custom = EpCapabilities(name="not-registered")
    assert get_ep(custom) is custom  # an instance is used as is, registered or not
    with pytest.raises(ValueError, match=re.escape("registered: " + ", ".join(BUILTIN))):
        get_ep("tpu")


def test_public_api_exports_the_registry():
    assert mobius.ep_registry is ep_registry
    assert mobius.get_ep("dml").name == "dml"
    assert mobius.EpCapabilities is EpCapabilities
    assert mobius.register_ep is register_ep


def test_iterating_while_registering_is_safe(isolated_registry):
    seen = []
    for caps in isolated_registry:  # iterates a snapshot
        seen.append(caps.name)
        if caps.name == "default":
            isolated_registry.register(EpCapabilities(name="late"))
    assert seen == BUILTIN
    assert isolated_registry.names()[-1] == "late"


# -- register_ep -----------------------------------------------------------------


def test_register_ep_adds_a_custom_ep(isolated_registry):
    caps = register_ep(EpCapabilities(name="my-npu", description="an out-of-tree EP"))
    assert caps.name == "my-npu"
    assert "my-npu" in isolated_registry
    assert get_ep("my-npu") is caps
    assert isolated_registry.names()[-1] == "my-npu"
    assert "my-npu" not in ep_registry  # the module-level built-in registry is untouched


def test_register_duplicate_needs_overwrite(isolated_registry):
    register_ep(EpCapabilities(name="my-npu", description="first"))
    with pytest.raises(ValueError, match="already registered.*overwrite=True"):
        register_ep(EpCapabilities(name="my-npu", description="second"))
    assert get_ep("my-npu").description == "first"
    register_ep(EpCapabilities(name="my-npu", description="second"), overwrite=True)
    assert get_ep("my-npu").description == "second"
    assert isolated_registry.names().count("my-npu") == 1


def test_register_duplicate_builtin_needs_overwrite(isolated_registry):
    with pytest.raises(ValueError, match="'cpu' is already registered"):
        register_ep(EpCapabilities(name="cpu"))
    assert get_ep("cpu").gqa_dtypes  # the built-in is untouched


def test_register_rejects_non_capabilities(isolated_registry):
    with pytest.raises(TypeError, match="EpCapabilities"):
        register_ep({"name": "dict-ep"})


def test_isolated_registry_fixture_does_not_leak():
    assert "my-npu" not in ep_registry
    assert ep_registry.names() == BUILTIN


# -- build() and the registry ---------------------------------------------------------


@pytest.fixture
def no_work(monkeypatch):
    """Makes every step after EP validation fail loudly if reached."""

    def forbidden(*args, **kwargs):
        raise AssertionError("build() went past EP validation")

    for name in ("resolve_checkpoint", "load_config", "open_checkpoint",
                 "build_from_module", "attach_weights"):
        monkeypatch.setattr(mobius.builder, name, forbidden)


def test_unknown_ep_fails_before_anything_is_read(no_work):
    with pytest.raises(ValueError) as info:
        mobius.builder.build("/nonexistent/checkpoint", execution_provider="tpu")
    assert "unknown execution provider 'tpu'" in str(info.value)
    assert "registered: " + ", ".join(BUILTIN) in str(info.value)


def test_unknown_ep_wins_over_a_missing_path():
    # No monkeypatching: the real path resolution would raise a path error.
    with pytest.raises(ValueError, match="unknown execution provider 'tpu'"):
        mobius.build("/nonexistent/checkpoint", execution_provider="tpu")


def test_unknown_ep_in_build_from_module_fails_before_building(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("graph construction started")

    from mobius.tasks import registry

    monkeypatch.setitem(registry.TASKS, "text-generation",
                        dataclasses.replace(registry.TASKS["text-generation"], build=forbidden))
    with pytest.raises(ValueError, match="unknown execution provider 'tpu'"):
        mobius.builder.build_from_module(object(), object(), execution_provider="tpu")


def test_build_accepts_a_registered_custom_ep(isolated_registry, tiny_llama):
    register_ep(EpCapabilities(
        name="my-gqa-npu",
        gqa_dtypes={ir.DataType.FLOAT},
        supports_fused_rope=True,
        contrib_ops={"GroupQueryAttention"},
        provider_options={"my_npu": {"mode": "fast"}},
    ))
    package = mobius.build(tiny_llama, execution_provider="my-gqa-npu")
    ops = {(n.domain, n.op_type) for n in package.model.graph}
    assert ("com.microsoft", "GroupQueryAttention") in ops
    assert ("", "Attention") not in ops
    session = package.genai_config["model"]["decoder"]["session_options"]
    assert session["provider_options"] == [{"my_npu": {"mode": "fast"}}]
    assert package.genai_config["search"]["past_present_share_buffer"] is True


def test_a_registered_ep_runs_end_to_end(isolated_registry, tiny_llama, tmp_path):
    """An out-of-tree EP goes the whole way like a built-in one: a register_ep() copy of the
    CPU EP's capabilities gives the CPU EP's graph, and onnxruntime-genai greedy-generates the
    same tokens with its saved package."""
    from testing.genai_harness import genai_generate

    register_ep(dataclasses.replace(get_ep("cpu"), name="my-cpu", description="a copy"))
    tokens, ops = {}, {}
    for ep in ("cpu", "my-cpu"):
        package = mobius.build(tiny_llama, execution_provider=ep)
        ops[ep] = sorted((n.domain, n.op_type) for n in package.model.graph)
        package.save(str(tmp_path / ep))
        tokens[ep] = genai_generate(str(tmp_path / ep), [[5, 9, 2, 7]], 6)
    assert ("com.microsoft", "GroupQueryAttention") in ops["my-cpu"]
    assert ops["my-cpu"] == ops["cpu"]
    assert len(tokens["my-cpu"][0]) == 6 and tokens["my-cpu"] == tokens["cpu"]


def test_build_rejects_the_custom_ep_once_it_is_gone(tiny_llama):
    with pytest.raises(ValueError, match="unknown execution provider 'my-gqa-npu'"):
        mobius.build(tiny_llama, execution_provider="my-gqa-npu")


def test_build_accepts_an_unregistered_capabilities_instance(tiny_llama):
    caps = EpCapabilities(name="adhoc")  # portable target, nothing fused, everything inlined
    package = mobius.build(tiny_llama, execution_provider=caps)
    assert all(n.domain in ("", "ai.onnx") for n in package.model.graph)
    assert "adhoc" not in ep_registry


def test_cli_lists_and_accepts_the_builtin_eps(capsys):
    from mobius import cli

    assert cli.main(["list", "eps"]) == 0
    out = capsys.readouterr().out
    for name in BUILTIN:
        assert name in out
    with pytest.raises(SystemExit):
        cli.main(["build", "--model", "tiny-llama", "out", "--ep", "tpu"])
    assert "invalid choice: 'tpu'" in capsys.readouterr().err
