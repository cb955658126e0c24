"""sentence-transformers' side of the all-MiniLM-L6-v2 tests (real_minilm_test,
real_quant_test), run at build time (reference_cases, //rules:references.bzl), so no test
process imports torch: SentenceTransformer(folder).encode's embeddings (its tokenizer,
pooling and Normalize) of the texts, and transformers' tokenization of them, which the
package's own tokenizer must reproduce.

* "sentences": SENTENCES sentences of the English text (real_quant_test: the tokenization).
* "retrieval": those sentences and QUERIES (real_minilm_test: embeddings and ranking).
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

from testing import real_text

SENTENCES = 30
QUERIES = (
    "Every person is born equal and has rights.",
    "A terrible war between the northern and southern states.",
    "The king taxed the colonies without their consent.",
    "Soldiers who died on the battlefield are honoured.",
)

CASES = ["retrieval", "sentences"]


def texts(case: str) -> list[str]:
    """The texts a case embeds, in order."""
    sentences = real_text.sentences(SENTENCES)
    return sentences + list(QUERIES) if case == "retrieval" else sentences


def write_case(case: str, folder: str) -> None:
    """reference.npz: the padded batch transformers' tokenizer makes of the texts
    (input_ids, token_type_ids, attention_mask) and, for "retrieval", the ``embeddings``."""
    import transformers

    from testing.real_weights import minilm_folder

    batch = texts(case)
    with tempfile.TemporaryDirectory(prefix="minilm-") as scratch:
        source = minilm_folder(scratch)
        feeds = transformers.AutoTokenizer.from_pretrained(source)(batch, padding=True,
                                                                   return_tensors="np")
        arrays = {k: np.asarray(v, np.int64) for k, v in feeds.items()}
        if case == "retrieval":
            arrays["embeddings"] = _sentence_transformers_embeddings(source, batch)
    np.savez(os.path.join(folder, "reference.npz"), **arrays)


def _sentence_transformers_embeddings(folder: str, batch: list[str]) -> np.ndarray:
    """SentenceTransformer(folder)'s own embeddings (its tokenizer, pooling and Normalize)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    return model.encode(batch, convert_to_numpy=True, batch_size=len(batch)).astype(np.float32)


def reference(case: str) -> dict[str, np.ndarray]:
    """The case's reference.npz arrays."""
    from testing.reference_cases import case_dir

    with np.load(os.path.join(case_dir(sys.modules[__name__], case), "reference.npz")) as data:
        return {key: data[key] for key in data.files}
