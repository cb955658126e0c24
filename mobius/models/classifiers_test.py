"""Classifier families (mobius/models/classifiers.py): routing by architecture, id2label in
the saved package, a cross-encoder reranker (num_labels 1), and label-config errors."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from mobius.errors import ConfigError
from mobius.models import classifiers
from mobius.models import classifiers_cases as cases
from mobius.models.registry import family_for
from mobius.tasks.labels import METADATA_KEY, id2label
from mobius.tiny.presets import TINY_PRESETS
from testing import encoder_runs
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, family_checkpoint, ort_session
from testing.reference_cases import case_dir


@pytest.mark.parametrize("family", classifiers.FAMILIES, ids=lambda f: f.name)
def test_the_architecture_picks_the_head(family):
    raw = TINY_PRESETS[family.tiny_preset]
    assert family_for(raw) is family
    assert family_for({**raw, "architectures": None}).task.name == "feature-extraction"


@pytest.mark.parametrize("family", classifiers.FAMILIES[:1] + classifiers.FAMILIES[4:5],
                         ids=lambda f: f.name)
def test_id2label_is_in_the_saved_metadata(family, tmp_path):
    folder = family_checkpoint(str(tmp_path / "ckpt"), family)
    built = build_package(folder, tmp_path / "onnx")
    model = onnx.load(os.path.join(built.path, "model.onnx"), load_external_data=False)
    metadata = {p.key: p.value for p in model.metadata_props}
    labels = TINY_PRESETS[family.tiny_preset]["id2label"]
    assert json.loads(metadata[METADATA_KEY]) == labels
    assert model.graph.output[0].type.tensor_type.shape.dim[-1].dim_value == len(labels)


def test_cross_encoder_reranker_scores_a_padded_batch(tmp_path):
    """BertForSequenceClassification with num_labels 1: one relevance logit per pair."""
    recorded = case_dir(cases, "cross_encoder")
    built = build_package(os.path.join(recorded, "ckpt"), tmp_path / "onnx")
    reference = encoder_runs.load(os.path.join(recorded, "reference.npz"))
    run = encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                         built.config)
    assert run.onnx["logits"].shape == (2, 1)
    assert run.diffs["logits"] <= 1e-4, run.diffs


@pytest.mark.parametrize("raw,match", [
    ({"id2label": {"0": "a", "2": "b"}}, "0..1"),
    ({"id2label": {"x": "a"}}, "class indices"),
    ({"id2label": []}, "non-empty mapping"),
    ({"num_labels": 0}, "positive count"),
])
def test_bad_labels_are_one_line_errors(raw, match):
    with pytest.raises(ConfigError, match=match):
        id2label(raw)


def test_num_labels_alone_names_labels_as_transformers_does():
    assert id2label({"num_labels": 2}) == {0: "LABEL_0", 1: "LABEL_1"}
