"""Building a package never imports torch or transformers (they are test-only references),
from a checkpoint folder or from a GGUF file; nor does `mobius run` (only `mobius verify`
needs them: the mobius[verify] extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = r"""
import json, sys
import mobius
from mobius.cli import main

package = mobius.build("tiny-llama", dtype="f16")
package.save(sys.argv[1] + "/api")
code = main(["build", "--model", "tiny-qwen3", "--dtype", "bf16", sys.argv[1] + "/cli"])
code += main(["run", sys.argv[1] + "/cli", "--prompt", "Hi", "--max-new-tokens", "2"])
mobius.build(sys.argv[2], quant="int8").save(sys.argv[1] + "/gguf")
heavy = sorted(m for m in ("torch", "transformers", "tensorflow", "jax") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_build_and_save_do_not_import_torch(tmp_path):
    from mobius.tiny.checkpoint import make_tiny_checkpoint
    from testing.gguf_files import write_gguf

    env = {**os.environ, "PYTHONPATH": _ROOT, "MOBIUS_CACHE": str(tmp_path / "cache")}
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "tiny-llama"))
    gguf = write_gguf(folder, str(tmp_path / "tiny.gguf"), "F16")
    result = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path), gguf], cwd=_ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, result.stderr
    # The builds really happened (else the check above proves nothing).
    for sub in ("api", "cli", "gguf"):
        assert os.path.getsize(tmp_path / sub / "model.onnx.data") > 0
        assert (tmp_path / sub / "genai_config.json").is_file()
