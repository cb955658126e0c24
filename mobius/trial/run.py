"""``mobius run OUT --prompt ...``: try a package on one input, the way its task is used."""

from __future__ import annotations

import json
import os
import sys

from mobius.errors import MobiusError
from mobius.trial import outputs
from mobius.trial.package import open_package

#: the generative task run here (onnxruntime-genai, greedy)
GENERATIVE = "text-generation"
#: what runs the tasks `mobius run` does not
_ELSEWHERE = "onnxruntime-genai (python -m onnxruntime_genai examples) or the clients in docs/clients/"


def run(folder: str, prompt: str, *, use_template: bool = True, max_new_tokens: int = 64,
        as_json: bool = False) -> int:
    """Runs the package in ``folder`` on ``prompt`` and prints its output."""
    package = open_package(folder)
    if package.task == GENERATIVE:
        from mobius.trial.generate import generate

        package.check_genai("run")
        result = generate(package.folder, prompt, use_template=use_template,
                          max_new_tokens=max_new_tokens, out=None if as_json else sys.stdout)
        if as_json:
            print(json.dumps(result))
        return 0
    if package.task not in outputs.TASKS:
        raise MobiusError(f"mobius run cannot run a {package.task} package (it runs "
                          f"{', '.join((GENERATIVE, *outputs.TASKS))}); run it with {_ELSEWHERE}")
    result = outputs.run_text(package, prompt)
    print(json.dumps(result) if as_json else outputs.show(package.task, result))
    return 0


def try_line(folder: str) -> str:
    """The one line of commands that try and check the package in ``folder`` (`mobius
    build` ends with it); empty where neither runs its task."""
    import shlex

    from mobius.trial.verify import VERIFIES

    package = open_package(folder)
    quoted, lines = shlex.quote(package.folder), []
    if package.task == GENERATIVE and not os.path.isfile(
            os.path.join(package.folder, "genai_config.json")):
        return ""  # a decoder outside the genai layout: its client runs it (docs/clients/)
    if package.task == GENERATIVE or package.task in outputs.TASKS:
        prompt = "Hello"
        if package.task == "fill-mask":
            prompt = f"Paris is the {outputs.mask_token(package) or '[MASK]'} of France."
        lines.append(f"try it: mobius run {quoted} --prompt {shlex.quote(prompt)}")
    if package.task in VERIFIES:
        lines.append(f"check it: mobius verify {quoted}")
    return "; ".join(lines)
