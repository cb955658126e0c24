"""Text-to-text generation (T5, mT5, BART, Marian) with a mobius package, onnxruntime and a tokenizer.

    mobius build --model google-t5/t5-small out/t5-small --ep cpu
    python docs/examples/text2text.py out/t5-small "translate English to German: Hello."

The package holds encoder.onnx and decoder.onnx (mobius/tasks/text2text.py). The
encoder runs once per batch and returns the cross-attention keys and values of every
decoder layer; the decoder then runs once per new token, fed its own self-attention
cache back and the encoder's cross cache unchanged. Decoding is greedy, as
transformers' ``generate(do_sample=False, num_beams=1)``: rows that produced the end
token continue with padding. The start, end and padding ids come from the decoder's
metadata. Needs only onnxruntime, tokenizers and numpy.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from text_inputs import load_tokenizer  # docs/examples/text_inputs.py, beside this file


def _session(package: str, name: str) -> ort.InferenceSession:
    return ort.InferenceSession(os.path.join(package, name), providers=["CPUExecutionProvider"])


def _named(session, values) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in session.get_outputs()], values))


def generate(package: str, texts: list[str], max_new_tokens: int = 20) -> np.ndarray:
    """Greedy token ids [batch, 1 + generated], starting with decoder_start_token_id."""
    encoder, decoder = _session(package, "encoder.onnx"), _session(package, "decoder.onnx")
    meta = decoder.get_modelmeta().custom_metadata_map
    start, pad = int(meta["decoder_start_token_id"]), int(meta["pad_token_id"])
    eos = {int(t) for t in meta["eos_token_id"].split(",") if t}
    encodings = load_tokenizer(package).encode_batch(texts)
    feeds = {"input_ids": np.array([e.ids for e in encodings], np.int64),
             "attention_mask": np.array([e.attention_mask for e in encodings], np.int64)}
    encoded = _named(encoder, encoder.run(None, feeds))
    cache = {name.replace("present", "past"): value for name, value in encoded.items()
             if name.startswith("present_")}
    for spec in decoder.get_inputs():  # the self cache starts empty
        if spec.name.startswith("past_") and "_self_" in spec.name:
            heads, head_dim = spec.shape[1], spec.shape[3]
            cache[spec.name] = np.zeros((len(texts), heads, 0, head_dim),
                                        encoded["encoder_hidden_states"].dtype)
    tokens = np.full((len(texts), 1), start, np.int64)
    done = np.zeros(len(texts), bool)
    for _ in range(max_new_tokens):
        out = _named(decoder, decoder.run(None, {
            "input_ids": tokens[:, -1:], "encoder_attention_mask": feeds["attention_mask"],
            **cache}))
        cache.update({name.replace("present", "past"): value for name, value in out.items()
                      if name.startswith("present_")})
        step = np.where(done, pad, out["logits"][:, -1].argmax(-1))
        tokens = np.concatenate([tokens, step[:, None]], axis=1)
        done |= np.isin(step, list(eos))
        if done.all():
            break
    return tokens


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    package, texts = argv[0], argv[1:]
    tokenizer = load_tokenizer(package)
    for text, ids in zip(texts, generate(package, texts)):
        print(f"{text!r} -> {tokenizer.decode(ids.tolist(), skip_special_tokens=True)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
