"""fill-mask families (mobius/models/masked_lm.py): tied and untied decoders read the
tensors transformers' forward uses (the saved copies are declared, nothing else is
left unread). The tied default is covered by encoder_parity_test.py."""

from __future__ import annotations

import os

import pytest

from mobius.models import masked_lm
from mobius.models import masked_lm_cases as cases
from mobius.models.registry import family_for
from mobius.tiny.presets import TINY_PRESETS
from testing import encoder_runs
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, ort_session
from testing.reference_cases import case_dir


def _parity(family, tmp_path):
    """The untied checkpoint of masked_lm_cases.py, built, against transformers' outputs."""
    recorded = case_dir(cases, family.name)
    built = build_package(os.path.join(recorded, "ckpt"), tmp_path / "onnx")
    reference = encoder_runs.load(os.path.join(recorded, "reference.npz"))
    return built, encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                                 built.config)


@pytest.mark.parametrize("family", masked_lm.FAMILIES, ids=lambda f: f.name)
def test_untied_decoder(family, tmp_path):
    """Untied, transformers keeps a head bias its forward never reads beside the decoder's
    own: reading the wrong one is off by the bias (~0.1), far above 1e-4."""
    built, run = _parity(family, tmp_path)
    assert built.config.tie_word_embeddings is False
    assert run.diffs["logits"] <= 1e-4, run.diffs


@pytest.mark.parametrize("family", masked_lm.FAMILIES, ids=lambda f: f.name)
def test_the_masked_lm_architecture_is_fill_mask(family):
    assert family_for(TINY_PRESETS[family.tiny_preset]) is family
    assert family.task.reference.auto_class == "AutoModelForMaskedLM"
