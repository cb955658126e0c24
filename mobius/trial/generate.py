"""``mobius run`` for a generative package: the prompt through the package's chat
template, then greedy tokens streamed from onnxruntime-genai as they are made.

onnxruntime-genai reads the package's genai_config.json, so the EP and its
options are the ones the package was built for; nothing here picks a provider.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from mobius.errors import MobiusError


def chat_template(folder: str) -> str | None:
    """The package's chat template (chat_template.jinja, or the ``chat_template`` of
    tokenizer_config.json / a processor's chat_template.json); None where it has none."""
    jinja = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read()
    for name in ("tokenizer_config.json", "chat_template.json"):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            template = json.load(f).get("chat_template")
        if isinstance(template, list):  # named templates: transformers uses "default"
            template = {t.get("name"): t.get("template") for t in template}.get("default")
        if isinstance(template, str):
            return template
    return None


def prompt_text(folder: str, tokenizer, prompt: str, use_template: bool) -> str:
    """The text fed to the model: ``prompt`` as one user turn of the chat template, or
    as is (``use_template`` off, or a package without a template: said on stderr)."""
    if not use_template:
        return prompt
    template = chat_template(folder)
    if template is None:
        print("mobius: the package has no chat template; feeding the prompt as is",
              file=sys.stderr)
        return prompt
    messages = json.dumps([{"role": "user", "content": prompt}])
    return tokenizer.apply_chat_template(messages, template_str=template,
                                         add_generation_prompt=True)


def generate(folder: str, prompt: str, *, use_template: bool = True, max_new_tokens: int = 64,
             out: TextIO | None = None) -> dict:
    """Greedy-generates up to ``max_new_tokens`` (an EOS ends it), writing each token's
    text to ``out`` as it comes; returns the prompt's ids, the new ids and the streamed text."""
    import onnxruntime_genai as og

    if max_new_tokens < 1:
        raise MobiusError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    model = og.Model(folder)
    tokenizer = og.Tokenizer(model)
    text = prompt_text(folder, tokenizer, prompt, use_template)
    ids = [int(i) for i in tokenizer.encode(text)]
    if not ids:
        raise MobiusError("the prompt encodes to no tokens")
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + max_new_tokens)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    stream, new, pieces = tokenizer.create_stream(), [], []
    while not generator.is_done():
        generator.generate_next_token()
        new.append(int(generator.get_next_tokens()[0]))
        pieces.append(stream.decode(new[-1]))
        if out is not None:
            out.write(pieces[-1])
            out.flush()
    if out is not None:
        out.write("\n")
    return {"prompt_ids": ids, "new_ids": new, "text": "".join(pieces)}
