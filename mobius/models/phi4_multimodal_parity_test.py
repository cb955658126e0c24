"""L3: the Phi-4-multimodal package (vision / embedding / decoder) vs transformers'
Phi4MultimodalForCausalLM, f32.

Three images of genai's HD form (testing/phi4mm_checkpoints.py): 1 x 2 crops with the
canvas's last columns padding, 2 x 1 crops with its last rows padding (the crop
positions rescale and the tiling cuts to the valid extent), 1 x 1 zero-padded to 3
crops. Row 0 of the batch holds the first two, row 1 the third, left-padded by 3.
The package runs as onnxruntime-genai chains it (vision -> embedding -> decoder, then
3 greedy decode steps through the embedding model with zero image features and the
presents fed back); transformers runs with its own cache. Compared to 1e-4: the merged
embeddings (the image features in place; relative to their size) and the logits of
every step (absolute).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mobius.builder import build  # noqa: E402
from testing.model_runs import ort_session  # noqa: E402
from testing.parity import compare_logits, position_ids_for  # noqa: E402
from testing.phi4mm_checkpoints import hd_inputs, load_phi4mm, make_phi4mm_checkpoint  # noqa: E402

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3
GRIDS = [(1, 2, 0, 5), (2, 1, 7, 0), (1, 1, 0, 0)]  # (rows, cols, padded rows, padded cols)

_LONGROPE = {"rope_parameters": {
    "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
    "short_factor": [1.0 + 0.1 * i for i in range(6)],
    "long_factor": [2.0 + 0.5 * i for i in range(6)]},
    "original_max_position_embeddings": 512}

# name: (checkpoint overrides, vision_config overrides)
CASES = {
    "default": ({}, {}),
    "feature_layer_last": ({}, {"feature_layer": -1}),  # both tower layers
    "longrope_long_prompt": (_LONGROPE, {}),  # prompts past 512: the long factors
    "full_rotary_tied": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                          "tie_word_embeddings": True}, {}),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            overrides, vision = CASES[name]
            folder = str(tmp_path_factory.mktemp(name) / "ckpt")
            make_phi4mm_checkpoint(folder, vision=vision, **overrides)
            made[name] = folder, load_phi4mm(folder)
        return made[name]

    return get


class Package:
    """The saved package's three onnxruntime sessions, chained as genai runs them."""

    def __init__(self, path: str, config):
        self.config = config
        self.vision, self.embedding, self.decoder = (
            ort_session(os.path.join(path, f"{name}.onnx"))
            for name in ("vision", "embedding", "model"))

    def embed(self, input_ids, features):
        return self.embedding.run(None, {"input_ids": input_ids, "image_features": features})[0]

    def decode(self, embeds, attention_mask, past):
        config = self.config
        feeds = {"inputs_embeds": embeds, "attention_mask": attention_mask,
                 "position_ids": position_ids_for(attention_mask, embeds.shape[1])}
        for i in range(config.num_hidden_layers):
            for j, kind in enumerate(("key", "value")):
                feeds[f"past_key_values.{i}.{kind}"] = past[i][j] if past else np.zeros(
                    (embeds.shape[0], config.num_key_value_heads, 0, config.head_dim), np.float32)
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(None, feeds)))
        return out["logits"], [(out[f"present.{i}.key"], out[f"present.{i}.value"])
                               for i in range(config.num_hidden_layers)]

    def generate(self, input_ids, attention_mask, pixels, sizes, mask):
        """(prefill inputs_embeds, per-step logits, greedy tokens)."""
        features = self.vision.run(None, {"pixel_values": pixels, "image_sizes": sizes,
                                          "image_attention_mask": mask})[0]
        embeds = self.embed(input_ids, features)
        logits, past = self.decode(embeds, attention_mask, None)
        steps, tokens, attn = [logits], [], attention_mask
        no_features = np.zeros((0, self.config.hidden_size), np.float32)
        for _ in range(STEPS):
            token = steps[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            attn = np.concatenate([attn, np.ones((attn.shape[0], 1), np.int64)], axis=1)
            logits, past = self.decode(self.embed(token, no_features), attn, past)
            steps.append(logits)
        return features, embeds, steps, tokens


def make_inputs(hf_model, seed=0):
    rng = np.random.default_rng(seed)
    pixels, sizes, mask, counts = hd_inputs(GRIDS, rng)
    image = hf_model.config.vision_config.image_token_id
    text = lambda n: [int(t) for t in rng.integers(3, image - 2, size=n)]  # noqa: E731
    row0 = text(2) + [image] * counts[0] + text(1) + [image] * counts[1] + text(2)
    row1 = [0] * PAD + text(2) + [image] * counts[2] + text(len(row0) - PAD - 2 - counts[2])
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    return input_ids, attention_mask, pixels, sizes, mask


def hf_reference(hf_model, input_ids, attention_mask, pixels, sizes, mask, tokens):
    """transformers' merged embeddings and per-step logits."""
    images = {"image_pixel_values": torch.from_numpy(pixels),
              "image_sizes": torch.from_numpy(sizes),
              "image_attention_mask": torch.from_numpy(mask)}
    with torch.no_grad():
        ids, attn = torch.from_numpy(input_ids), torch.from_numpy(attention_mask)
        body = hf_model.model
        merged = body.embed_tokens_extend(ids, body.embed_tokens(ids), **images)
        out = hf_model(input_ids=ids, attention_mask=attn, use_cache=True,
                       position_ids=torch.from_numpy(position_ids_for(attention_mask,
                                                                      ids.shape[1])), **images)
        logits, cache = [out.logits.numpy()], out.cache
        for token in tokens:
            attn = torch.cat([attn, torch.ones((attn.shape[0], 1), dtype=attn.dtype)], dim=1)
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=attn, cache=cache,
                           position_ids=torch.from_numpy(position_ids_for(attn.numpy(), 1)),
                           use_cache=True)
            cache = out.cache
            logits.append(out.logits.numpy())
    return merged.numpy(), logits


PARAMS = [(name, "default") for name in sorted(CASES)] + [("default", "cpu")]


@pytest.mark.parametrize("name,ep", PARAMS, ids=[f"{n}-{e}" for n, e in PARAMS])
def test_f32_parity(name, ep, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    pkg = Package(package.save(str(tmp_path / "pkg")), package.config)
    inputs = make_inputs(hf_model)
    features, embeds, steps, tokens = pkg.generate(*inputs)
    hf_merged, hf_steps = hf_reference(hf_model, *inputs, tokens)

    assert features.shape[0] == int((inputs[0] == pkg_image_token(hf_model)).sum())
    # relative: the tower's N(0, 1) attention weights (transformers' init) make image
    # features whose rounding grows with their O(1) size
    embeds_diff = float(np.abs(embeds - hf_merged).max() / np.abs(hf_merged).max())
    assert embeds_diff <= F32_TOLERANCE, f"{name}: embeddings (relative) {embeds_diff:.3g}"
    diff = compare_logits(steps, hf_steps, inputs[1])
    assert diff <= F32_TOLERANCE, f"{name}: logits {diff:.3g}"


def pkg_image_token(hf_model) -> int:
    return hf_model.config.vision_config.image_token_id
