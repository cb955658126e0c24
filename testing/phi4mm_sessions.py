"""A saved Phi-4-multimodal package's sessions (vision, speech, embedding, decoder),
chained as onnxruntime-genai's phi4mm type runs them, on a recorded batch
(testing/vlm_reference.py; mobius/models/phi4_multimodal_parity_cases.py)."""

from __future__ import annotations

import os

from testing import vlm_reference
from testing.model_runs import ort_session
from testing.vlm_sessions import Sessions


class Phi4MMSessions(Sessions):
    """The saved package's onnxruntime sessions, chained as genai runs them."""

    def embed(self, input_ids, features, audio=None):
        feeds = {"input_ids": input_ids, "image_features": features}
        if "audio_features" in {i.name for i in self.embedding.get_inputs()}:
            feeds["audio_features"] = self.no_features() if audio is None else audio
        return self.embedding.run(None, feeds)[0]

    def generate(self, ref: vlm_reference.VlmReference, steps: int):
        """(image features, prefill inputs_embeds, per-step logits) of ``ref``'s batch, the
        ``steps`` decode steps on transformers' greedy tokens."""
        images = "pixels" in ref.arrays
        features = self.vision.run(None, {
            "pixel_values": ref["pixels"], "image_sizes": ref["sizes"],
            "image_attention_mask": ref["mask"]})[0] if images else self.no_features()
        audio = {k[len("feed."):]: v for k, v in ref.arrays.items() if k.startswith("feed.")}
        audio_features = None
        if audio:
            speech = ort_session(os.path.join(self.path, "speech.onnx"))
            audio_features = speech.run(None, audio)[0]
        embeds = self.embed(ref["input_ids"], features, audio_features)
        logits, _ = self.greedy(ref["input_ids"], embeds, ref["attention_mask"], steps,
                                tokens=ref.tokens)
        return features, embeds, logits
