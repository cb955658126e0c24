"""The JSON persistent-worker loop, driven as Bazel drives it: a process fed requests on
stdin whose stdout must hold the responses and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from testing.bazel_worker import expand_flagfiles

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A worker whose handler echoes its arguments, prints stray text and fails on "boom".
_SCRIPT = """
import ctypes, sys
from testing.bazel_worker import serve

def handler(args):
    print("stray print")
    ctypes.CDLL(None).puts(b"stray C write")
    if args == ["boom"]:
        raise RuntimeError("boom went the handler")
    return (3 if args == ["fail"] else 0), " ".join(args)

sys.exit(serve(handler))
"""


def _serve(stdin: bytes) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    return subprocess.run([sys.executable, "-c", _SCRIPT], input=stdin, cwd=_ROOT, env=env,
                          capture_output=True, timeout=60)


def test_stdout_holds_one_response_per_request_and_nothing_else(tmp_path):
    flagfile = tmp_path / "args"
    flagfile.write_text("from\nflag file\n")
    requests = [
        '{"arguments":["a","b"],"requestId":0}',  # Bazel sends no newline between requests
        '{"arguments":["fail"],"inputs":[{"path":"x","digest":"eQ=="}]}\n',
        '{\n  "arguments": ["@%s"],\n  "requestId": 7\n}\n' % flagfile,  # pretty-printed
        '{"arguments":["boom"]}',
        '{"arguments":["after"]}',
    ]
    result = _serve("".join(requests).encode())
    assert result.returncode == 0, result.stderr.decode()
    responses = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert responses[:3] == [
        {"exitCode": 0, "output": "a b", "requestId": 0},
        {"exitCode": 3, "output": "fail", "requestId": 0},
        {"exitCode": 0, "output": "from flag file", "requestId": 7},
    ]
    boom = responses[3]
    assert boom["exitCode"] == 1 and "RuntimeError: boom went the handler" in boom["output"]
    assert responses[4] == {"exitCode": 0, "output": "after", "requestId": 0}
    assert len(responses) == 5
    stderr = result.stderr.decode()
    assert stderr.count("stray print") == 5 and stderr.count("stray C write") == 5


def test_stdin_closing_inside_a_request_is_an_error():
    result = _serve(b'{"arguments":["a"]}{"argum')
    assert result.returncode != 0
    assert [json.loads(line) for line in result.stdout.decode().splitlines()] == [
        {"exitCode": 0, "output": "a", "requestId": 0}]
    assert "stdin ended inside a request" in result.stderr.decode()


def test_flagfiles_expand_to_their_lines(tmp_path):
    flagfile = tmp_path / "args"
    flagfile.write_text("tiny-llama\nout dir\n")
    assert expand_flagfiles(["x", f"@{flagfile}", "@@literal"]) == [
        "x", "tiny-llama", "out dir", "@@literal"]
