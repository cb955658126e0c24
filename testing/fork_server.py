"""Runs many ``mobius`` CLI invocations cheaply, each isolated and bounded.

One server process imports mobius once, under RLIMIT_AS, then forks a child
per request that runs ``mobius.cli.main(argv)`` under an alarm. A bomb that
slips past mobius' checks dies in its child (MemoryError, SIGALRM) and the
test sees it as a failure; the machine and the test process are unharmed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SERVER = r"""
import json, os, resource, signal, sys, traceback
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.path.insert(0, sys.argv[2])
import mobius.cli, mobius.builder, mobius.package.model_package  # imported once, shared by forks
for line in sys.stdin:
    request = json.loads(line)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        signal.alarm(request["timeout"])
        try:
            code = mobius.cli.main(request["argv"])
        except BaseException:
            traceback.print_exc()
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        output = f.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(status), "output": output}), flush=True)
"""


@dataclasses.dataclass
class Result:
    code: int  # exit code; negative: killed by that signal (SIGALRM = -14: timed out)
    output: str  # stdout + stderr


class ForkServer:
    """``with ForkServer() as server: server.run(["build", ...])``."""

    def __init__(self, memory_bytes: int = 3 << 30):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOBIUS_SAVE_")}
        env["OMP_NUM_THREADS"] = "1"
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(memory_bytes), ROOT], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, argv: list[str], timeout: int = 60) -> Result:
        self._process.stdin.write(json.dumps({"argv": argv, "timeout": timeout}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died")
        return Result(**json.loads(line))

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc) -> None:
        self._process.stdin.close()
        self._process.wait(timeout=30)
