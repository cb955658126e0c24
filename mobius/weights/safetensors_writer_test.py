"""write_sharded: every shard non-empty and indexed, tensors read back exactly."""

import json
import os

import numpy as np
import pytest

from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_sharded


@pytest.mark.parametrize("count, shards, expected_files", [(4, 3, 2), (6, 3, 3), (2, 5, 2), (1, 1, 1)])
def test_no_empty_shards_and_round_trip(tmp_path, count, shards, expected_files):
    tensors = [(f"t{i}", np.full((2, 3), i, np.float32)) for i in range(count)]
    write_sharded(str(tmp_path), tensors, shards)
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".safetensors"))
    assert len(files) == expected_files
    with open(tmp_path / "model.safetensors.index.json") as f:
        weight_map = json.load(f)["weight_map"]
    assert sorted(set(weight_map.values())) == files
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    for name, array in tensors:
        np.testing.assert_array_equal(checkpoint.read(name), array)


def test_lazy_tensors_are_made_per_shard(tmp_path):
    made = []

    def make(i):
        def build():
            made.append(i)
            return np.full((4,), i, np.float32)
        return build

    write_sharded(str(tmp_path), [(f"t{i}", make(i)) for i in range(4)], 2)
    assert made == [0, 1, 2, 3]
