"""Build action behind ``real_checkpoint`` (rules/real_weights.bzl): one real-weights folder
(testing/real_weights.py) written once per build, so test targets share it as data.

    python3 -m testing.write_real_checkpoint smollm2 OUT_DIR
"""

from __future__ import annotations

import os
import sys

from testing.real_weights import minilm_folder, smollm2_folder

WRITERS = {"smollm2": smollm2_folder, "minilm": minilm_folder}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in WRITERS:
        print(f"usage: python3 -m testing.write_real_checkpoint {{{','.join(WRITERS)}}} OUT_DIR",
              file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF dequantization bar
    WRITERS[argv[0]](argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
