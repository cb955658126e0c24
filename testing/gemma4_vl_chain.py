"""The Gemma 4 vision-language packages as onnxruntime-genai chains them (vision ->
embedding -> decoder on inputs_embeds + input_ids, greedy tokens through the embedding
model), shared by mobius/models/gemma4_vl_test.py and gemma4_unified_test.py."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from mobius.builder import build
from testing import vlm_reference
from testing.gemma4_genai_prompt import add_media_tokens
from testing.model_runs import ort_session
from testing.parity import position_ids_for
from testing.reference_cases import case_dir


class Chain:
    """vision.onnx, embedding.onnx and model.onnx of a saved package."""

    def __init__(self, path: str):
        self.vision, self.embedding, self.decoder = (
            ort_session(os.path.join(path, f"{name}.onnx"))
            for name in ("vision", "embedding", "model"))
        self.past = {i.name: i.shape for i in self.decoder.get_inputs()
                     if i.name.startswith("past_key_values.")}
        self.width = self.embedding.get_inputs()[1].shape[1]
        speech = os.path.join(path, "speech.onnx")
        self.speech = ort_session(speech) if os.path.exists(speech) else None

    def features(self, pixels, positions):
        return self.vision.run(None, {"pixel_values": pixels, "pixel_position_ids": positions})[0]

    def audio(self, features, mask):
        """speech.onnx on one batch of clips (every clip's tokens kept)."""
        return self.speech.run(None, {"audio_embeds": features, "audio_attention_mask": mask,
                                      "audio_sizes": np.full(len(mask), 2**40, np.int64)})[0]

    def embed(self, ids, features, audio=None):
        """The embedding model; no audio: none (where the package has a speech model)."""
        feeds = {"input_ids": ids, "image_features": features}
        if self.speech is not None:
            feeds["audio_features"] = (np.zeros((0, self.width), np.float32) if audio is None
                                       else audio)
        return self.embedding.run(None, feeds)[0]

    def decode(self, ids, embeds, mask, past):
        feeds = {"inputs_embeds": embeds, "input_ids": ids, "attention_mask": mask,
                 "position_ids": position_ids_for(mask, ids.shape[1])}
        for name, shape in self.past.items():
            feeds[name] = past.get(name.replace("past_key_values.", "present."), np.zeros(
                (ids.shape[0], shape[1], 0, shape[3]), np.float32))
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(None, feeds)))
        return out["logits"], {k: v for k, v in out.items() if k.startswith("present.")}

    def run(self, ref):
        """(features, merged embeddings, per-step logits) on transformers' greedy tokens."""
        features = self.features(ref["pixel_values"], ref["image_position_ids"])
        ids, mask = ref["input_ids"], ref["attention_mask"]
        embeds = self.embed(ids, features)
        logits, past = self.decode(ids, embeds, mask, {})
        steps = [logits]
        for token in ref.tokens:
            mask = np.concatenate([mask, np.ones((mask.shape[0], 1), mask.dtype)], axis=1)
            step_embeds = self.embed(token, np.zeros((0, self.width), np.float32))
            logits, past = self.decode(token, step_embeds, mask, past)
            steps.append(logits)
        return features, embeds, steps


def load_case(cases, name: str):
    """(checkpoint folder, transformers' recorded run) of a reference case."""
    folder = case_dir(cases, name)
    return os.path.join(folder, "ckpt"), vlm_reference.load(os.path.join(folder, "run.npz"))


def built_chain(folder, out, ep="default") -> Chain:
    """The package of ``folder`` built for ``ep`` (f32), saved to ``out``, as a Chain."""
    package = build(folder, execution_provider=ep, dtype="f32")
    return Chain(package.save(str(out), overwrite=True))


def diffs(ours, ref) -> dict[str, float]:
    """Max |difference| per compared output (prefill logits at real tokens only)."""
    features, embeds, steps = ours
    real = ref["attention_mask"].astype(bool)
    out = {"features": np.abs(features - ref["features"]).max(),
           "merged": np.abs(embeds - ref["merged"])[real].max()}
    for i, (got, want) in enumerate(zip(steps, ref.logits)):
        out[f"logits{i}"] = np.abs(got - want)[real].max() if i == 0 else np.abs(got - want).max()
    return {k: float(v) for k, v in out.items()}


def edited(folder, out, edit) -> str:
    """A copy of checkpoint ``folder`` at ``out`` with config.json sections updated."""
    shutil.copytree(folder, out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    for section, values in edit.items():
        config[section].update(values)
    with open(path, "w") as f:
        json.dump(config, f)
    return str(out)


def processor_package(path, out, extra_json: dict | None = None) -> str:
    """A copy of package ``path`` at ``out`` whose tokenizer.json holds Gemma 4's media
    markers (testing/gemma4_genai_prompt.py), with ``extra_json`` ({file name: JSON})
    written beside."""
    shutil.copytree(path, out)
    add_media_tokens(str(out))
    for name, body in (extra_json or {}).items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(body, f)
    return str(out)
