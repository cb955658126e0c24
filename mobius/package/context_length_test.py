"""--context-length: genai_config's cap and KV size, checked against the model."""

import json
import os

import numpy as np
import onnxruntime_genai as og
import pytest

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.package.context_length import DEFAULT_CONTEXT_LENGTH, resolve_context_length
from mobius.tiny.checkpoint import make_tiny_checkpoint


def test_default_caps_long_models_and_keeps_short_ones():
    assert resolve_context_length(None, 131072) == DEFAULT_CONTEXT_LENGTH == 4096
    assert resolve_context_length(None, 256) == 256
    assert resolve_context_length(100, 256) == 100


def test_a_static_shape_ep_caps_it_at_its_kv_slots():
    """The qnn EP's decoders hold 256 KV slots: the default is that, no more is taken."""
    assert resolve_context_length(None, 131072, static=256) == 256
    assert resolve_context_length(None, 128, static=256) == 128
    assert resolve_context_length(200, 131072, static=256) == 200
    with pytest.raises(ConfigError, match="256 KV slots"):
        resolve_context_length(512, 131072, static=256)


@pytest.mark.parametrize("bad", [0, -5, 257, 2.5, True])
def test_bad_values_are_rejected(bad):
    with pytest.raises(ConfigError, match="context length"):
        resolve_context_length(bad, 256)


def test_cli_writes_it_and_genai_keeps_to_it(tmp_path, capsys):
    checkpoint = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))  # 256 positions
    out = str(tmp_path / "pkg")
    assert main(["build", "--model", checkpoint, out, "--ep", "cpu", "--context-length", "40",
                 "--quiet"]) == 0
    with open(os.path.join(out, "genai_config.json")) as f:
        genai = json.load(f)
    assert genai["model"]["context_length"] == genai["search"]["max_length"] == 40
    model = og.Model(out)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.arange(5, 15, dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    assert len(generator.get_sequence(0)) == 40  # stops at the package's max_length
    bad = str(tmp_path / "bad")
    assert main(["build", "--model", checkpoint, bad, "--context-length", "300", "--quiet"]) == 1
    assert "exceeds the model's max_position_embeddings (256)" in capsys.readouterr().err
    assert not os.path.exists(bad)
