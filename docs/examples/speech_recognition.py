"""Speech recognition with a mobius CTC package (wav2vec2, HuBERT) and onnxruntime.

    mobius build --model facebook/wav2vec2-base-960h out/w2v --ep cpu
    python docs/examples/speech_recognition.py out/w2v speech.wav [more.wav ...]

Each WAV file must be 16-bit PCM at the package's sampling rate (16 kHz for
the hub's checkpoints; resample first otherwise), mono or the first channel.
The package's processor files do what transformers' Wav2Vec2Processor does:
preprocessor_config.json says how to normalize the waveform, vocab.json and
tokenizer_config.json how to read the CTC output (greedy: best token per frame,
repeats collapsed, blanks dropped, the word delimiter as a space). Each file
runs as its own batch of one, as transformers' pipeline runs them (a padded
batch needs the attention_mask the package takes for layer-norm feature
encoders, and cutting each row's logits at its own frame count). Needs only
onnxruntime and numpy (``Wav2Vec2Processor.from_pretrained(package)`` loads the
same files, if you prefer transformers).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import wave

import numpy as np
import onnxruntime as ort


def _json(package: str, name: str) -> dict:
    with open(os.path.join(package, name), encoding="utf-8") as f:
        return json.load(f)


def read_wav(path: str, sampling_rate: int) -> np.ndarray:
    """A 16-bit PCM WAV file's first channel as float32 in [-1, 1)."""
    with wave.open(path, "rb") as f:
        if f.getsampwidth() != 2 or f.getframerate() != sampling_rate:
            raise SystemExit(f"{path}: need 16-bit PCM at {sampling_rate} Hz, got "
                             f"{8 * f.getsampwidth()}-bit at {f.getframerate()} Hz")
        samples = np.frombuffer(f.readframes(f.getnframes()), np.int16)
        samples = samples.reshape(-1, f.getnchannels())[:, 0]
    return samples.astype(np.float32) / 32768.0


class Transcriber:
    """model.onnx plus the processor files of one package."""

    def __init__(self, package: str):
        self.session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                            providers=["CPUExecutionProvider"])
        self.features = _json(package, "preprocessor_config.json")
        tokenizer = _json(package, "tokenizer_config.json")
        vocab = _json(package, "vocab.json")
        self.tokens = {i: token for token, i in vocab.items()}
        self.blank = vocab[tokenizer.get("pad_token", "<pad>")]
        self.delimiter = tokenizer.get("word_delimiter_token", "|")
        self.lower = bool(tokenizer.get("do_lower_case", False))
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.takes_mask = "attention_mask" in inputs
        self.dtype = np.float16 if inputs["input_values"].type == "tensor(float16)" else np.float32

    def normalize(self, waveform: np.ndarray) -> np.ndarray:
        """Zero mean, unit variance (Wav2Vec2FeatureExtractor's do_normalize)."""
        if not self.features.get("do_normalize", True):
            return waveform
        return (waveform - waveform.mean()) / np.sqrt(waveform.var() + 1e-7)

    def logits(self, waveform: np.ndarray) -> np.ndarray:
        """Per-frame logits [frames, vocab] of one waveform."""
        values = self.normalize(waveform)[None].astype(self.dtype)
        feeds = {"input_values": values}
        if self.takes_mask:  # layer-norm feature encoders: nothing padded here
            feeds["attention_mask"] = np.ones(values.shape, np.int64)
        (logits,) = self.session.run(["logits"], feeds)
        return logits[0]

    def decode(self, logits: np.ndarray) -> str:
        """CTC greedy decoding, as Wav2Vec2CTCTokenizer.decode reads the argmax ids."""
        ids = [int(i) for i, _ in itertools.groupby(logits.argmax(-1)) if i != self.blank]
        text = "".join(" " if self.tokens[i] == self.delimiter else self.tokens[i] for i in ids)
        return text.strip().lower() if self.lower else text.strip()

    def transcribe(self, waveform: np.ndarray) -> str:
        return self.decode(self.logits(waveform))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    transcriber = Transcriber(argv[0])
    rate = transcriber.features.get("sampling_rate", 16000)
    for path in argv[1:]:
        print(f"{path}: {transcriber.transcribe(read_wav(path, rate))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
