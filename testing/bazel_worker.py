"""Bazel's persistent-worker loop over the JSON protocol, for a build tool written in Python.

Bazel starts the tool once with ``--persistent_worker`` and sends one WorkRequest per
action on stdin ({"arguments": [...], "requestId": N, ...}; Bazel 4.2.3 needs
``--experimental_worker_allow_json_protocol``); the tool answers each with one
WorkResponse ({"exitCode", "output", "requestId"}) on stdout. So the tool's imports
are paid once per worker process instead of once per action.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import BinaryIO

# One request's work: its arguments -> (exit code, message for the user).
Handler = Callable[[list[str]], tuple[int, str]]


def serve(handler: Handler) -> int:
    """Answers WorkRequests until stdin closes. Only responses reach the real stdout:
    anything else printed (by Python or a C library) goes to stderr, Bazel's worker log."""
    responses = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for request in read_requests(sys.stdin.buffer):
        code, message = run_request(handler, request.get("arguments", []))
        json.dump({"exitCode": code, "output": message, "requestId": request.get("requestId", 0)},
                  responses)
        responses.write("\n")
        responses.flush()
    return 0


def main(handler: Handler, argv: list[str]) -> int:
    """A tool's entry point: Bazel's worker loop under ``--persistent_worker``, else one
    request from ``argv`` (``@file`` arguments expanded), its message on stderr."""
    if argv == ["--persistent_worker"]:
        return serve(handler)
    code, message = handler(expand_flagfiles(argv))
    if message:
        print(message, file=sys.stderr)
    return code


def run_request(handler: Handler, args: list[str]) -> tuple[int, str]:
    """The handler's result; an unexpected exception fails this request only."""
    try:
        return handler(expand_flagfiles(args))
    except Exception:  # noqa: BLE001 -- reported to Bazel as this action's failure
        return 1, traceback.format_exc()


def read_requests(stream: BinaryIO) -> Iterator[dict]:
    """The JSON objects on ``stream``, however Bazel splits them across lines or reads:
    reads what is available (never waits for a newline Bazel may not send)."""
    decoder, text = json.JSONDecoder(), ""
    utf8 = codecs.getincrementaldecoder("utf-8")()
    while chunk := os.read(stream.fileno(), 1 << 16):
        text += utf8.decode(chunk)
        while text := text.lstrip():
            try:
                request, end = decoder.raw_decode(text)
            except json.JSONDecodeError:
                break  # incomplete: read more
            text = text[end:]
            yield request
    if text.strip():
        raise ValueError(f"worker: stdin ended inside a request: {text[:80]!r}")


def expand_flagfiles(args: list[str]) -> list[str]:
    """``@file`` arguments replaced by the file's lines (Bazel's "multiline" param files)."""
    out = []
    for arg in args:
        if arg.startswith("@") and not arg.startswith("@@"):
            with open(arg[1:], encoding="utf-8") as f:
                out.extend(f.read().splitlines())
        else:
            out.append(arg)
    return out
