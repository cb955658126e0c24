"""--quant-calibration FILE.txt: the text whose activations calibrated int4 is fitted to.

Read and checked before any weight is opened, tokenized with the
checkpoint's own tokenizer (``tokenizer.json``, the `tokenizers` library the
package writer already uses), and cut into windows of ``WINDOW`` tokens. The
windows are what activation_stats.py feeds the float graph; each is one
prefill from an empty cache, so a window must fit the model's positions.

At most ``MAX_TOKENS`` are used: GPTQ's statistics settle after a few
thousand tokens (each K x K Gram matrix needs ~K tokens to be full rank,
and damping covers the rest), while the float model's run and the
accumulation grow with every token. Fewer than one window is refused: a
handful of tokens says nothing about the activations and the file was
likely not the one meant.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from mobius.errors import MobiusError

#: tokens per window (one prefill each)
WINDOW = 256
#: tokens used at most (the first ones of the file)
MAX_TOKENS = 4096
#: runs over the text: 1 from the float model, each further one from the model as the
#: previous statistics quantize it (quantize/sequential.py)
PASSES = 2
TOKENIZER_FILE = "tokenizer.json"


@dataclasses.dataclass(frozen=True)
class CalibrationText:
    """Token windows cut from one text file.

    Attributes:
        path: the file, for messages.
        windows: int64 [count, window] token ids.
        progress: show a progress bar while the float model runs.
        passes: runs over the text (quantize/sequential.py).
    """

    path: str
    windows: np.ndarray
    progress: bool = False
    passes: int = PASSES


def read_text(path: str) -> str:
    """The file's text; MobiusError naming it if missing, not UTF-8 or blank."""
    if not os.path.isfile(path):
        raise MobiusError(f"--quant-calibration {path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise MobiusError(f"--quant-calibration {path}: not UTF-8 text (byte {error.start} "
                          f"cannot be decoded)") from None
    if not text.strip():
        raise MobiusError(f"--quant-calibration {path}: the file is empty")
    return text


def load_calibration(path: str, checkpoint: str, max_positions: int | None,
                     progress: bool = False, passes: int | None = None) -> CalibrationText:
    """``path``'s text as token windows of the tokenizer in the folder ``checkpoint``;
    ``passes``: runs over it (None: PASSES)."""
    path = os.fspath(path)
    text = read_text(path)
    tokenizer_path = os.path.join(checkpoint, TOKENIZER_FILE)
    if not os.path.isfile(tokenizer_path):
        raise MobiusError(f"--quant-calibration {path}: the checkpoint has no {TOKENIZER_FILE} "
                          f"to tokenize it with")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.no_truncation()  # an encoder's tokenizer.json may cut every text at 128
    tokenizer.no_padding()
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    window = min(WINDOW, max_positions or WINDOW)
    if len(ids) < window:
        raise MobiusError(f"--quant-calibration {path}: {len(ids)} tokens; calibration needs at "
                          f"least {window} (one window)")
    count = min(len(ids), MAX_TOKENS) // window
    windows = np.array(ids[: count * window], dtype=np.int64).reshape(count, window)
    return CalibrationText(path, windows, progress, PASSES if passes is None else passes)
