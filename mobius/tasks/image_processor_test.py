"""preprocessor_config.json: read from the checkpoint (malformed -> one-line ConfigError),
fitted to the graph's image size."""

from __future__ import annotations

import json

import pytest

from mobius.errors import ConfigError
from mobius.tasks import image_processor as p

DINOV2_HUB = {"image_processor_type": "BitImageProcessor", "do_resize": True,
              "size": {"shortest_edge": 256}, "do_center_crop": True,
              "crop_size": {"height": 224, "width": 224}, "image_mean": p.IMAGENET_MEAN}


def test_matching_processor_is_kept():
    square = p.resize_processor("ViTImageProcessor", 32, p.HALF, p.HALF, p.BILINEAR)
    assert p.fit_to_size(square, 32) == square
    crop = p.crop_processor("CLIPImageProcessor", 32, p.HALF, p.HALF, p.BICUBIC)
    assert p.fit_to_size(crop, 32) == crop


def test_crop_processor_scales_to_the_graph_size(caplog):
    fitted = p.fit_to_size(DINOV2_HUB, 518)
    assert fitted["crop_size"] == {"height": 518, "width": 518}
    assert fitted["size"] == {"shortest_edge": 592}  # 256 * 518 / 224, the same margin
    assert fitted["image_mean"] == p.IMAGENET_MEAN
    assert "518" in caplog.text


def test_resize_processor_resizes_to_the_graph_size():
    fitted = p.fit_to_size({"do_resize": True, "size": {"height": 384, "width": 384}}, 224)
    assert fitted["size"] == {"height": 224, "width": 224} and not fitted["do_center_crop"]


def test_read_extras(tmp_path):
    assert p.read_extras(str(tmp_path)) == {}
    (tmp_path / p.FILE).write_text(json.dumps(DINOV2_HUB))
    assert p.read_extras(str(tmp_path)) == {p.RAW_KEY: DINOV2_HUB}
    (tmp_path / p.FILE).write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        p.read_extras(str(tmp_path))
    (tmp_path / p.FILE).write_text("{not json")
    with pytest.raises(ConfigError) as caught:
        p.read_extras(str(tmp_path))
    assert "\n" not in str(caught.value)
