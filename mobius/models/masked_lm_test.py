"""fill-mask families (mobius/models/masked_lm.py): tied and untied decoders read the
tensors transformers' forward uses (the saved copies are declared, nothing else is
left unread). The tied default is covered by encoder_parity_test.py."""

from __future__ import annotations

import os

import pytest

from mobius.models import masked_lm
from mobius.models.registry import family_for
from mobius.tiny.presets import TINY_PRESETS
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, make_family_checkpoint, ort_session


def _parity(family, tmp_path, **overrides):
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), family, **overrides)
    built = build_package(folder, tmp_path / "onnx")
    return built, encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), folder,
                                 built.config)


@pytest.mark.parametrize("family", masked_lm.FAMILIES, ids=lambda f: f.name)
def test_untied_decoder(family, tmp_path):
    """Untied, transformers keeps a head bias its forward never reads beside the decoder's
    own: reading the wrong one is off by the bias (~0.1), far above 1e-4."""
    built, run = _parity(family, tmp_path, tie_word_embeddings=False)
    assert built.config.tie_word_embeddings is False
    assert run.diffs["logits"] <= 1e-4, run.diffs


@pytest.mark.parametrize("family", masked_lm.FAMILIES, ids=lambda f: f.name)
def test_the_masked_lm_architecture_is_fill_mask(family):
    assert family_for(TINY_PRESETS[family.tiny_preset]) is family
    assert family.task.reference.auto_class == "AutoModelForMaskedLM"
