"""Runs decoder cases in headless Chromium through onnxruntime-web's WebGPU backend.

Debian's ``chromium`` ships SwiftShader's Vulkan driver, so with
``--enable-unsafe-webgpu`` a headless browser gets a WebGPU adapter on the CPU.
A loopback HTTP server (127.0.0.1, an ephemeral port, this process only)
serves the page, onnxruntime-web's dist folder, the packages and the cases; the
page replays every case in one browser start and POSTs the results back.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading

from testing.js.node import HERE, node_env

CHROMIUM = "chromium"
#: where Chromium's singleton socket goes: a socket path has at most 107 bytes, and Bazel's
#: TEST_TMPDIR is longer (Chromium aborts), so a folder here, removed when the browser stops
#: (a terminated Chromium leaves its own behind)
_SHORT_TMP = "/tmp"


def chromium_path() -> str | None:
    return shutil.which(CHROMIUM)


def run_in_chromium(case_paths: list[str], profile_dir: str, *, ep: str = "webgpu",
                    timeout: float = 300) -> dict:
    """The page's result: {"results": [{"steps": [...]} or {"error": ...}, ...] in the
    order of ``case_paths``, "adapter": ...}, or {"error": ...} if the page itself failed."""
    roots = {"harness": HERE,
             "ort": os.path.join(node_env()["MOBIUS_NODE_MODULES"], "onnxruntime-web", "dist")}
    for i, case_path in enumerate(case_paths):
        with open(case_path) as f:
            roots[f"model{i}"] = os.path.dirname(json.load(f)["model"])
        roots[f"case{i}"] = os.path.dirname(case_path)
    done, result = threading.Event(), {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(roots, result, done))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = (f"http://127.0.0.1:{server.server_address[1]}/harness/browser_runner.html"
           f"?ep={ep}&cases={len(case_paths)}")
    socket_dir = tempfile.mkdtemp(prefix="chromium-", dir=_SHORT_TMP)
    browser = subprocess.Popen(
        [chromium_path() or CHROMIUM, "--headless=new", "--no-sandbox", "--enable-unsafe-webgpu",
         "--no-first-run", f"--user-data-dir={profile_dir}", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": socket_dir})
    try:
        if not done.wait(timeout):
            raise TimeoutError(f"chromium gave no result within {timeout} s")
    finally:
        browser.terminate()
        browser.wait(30)
        server.shutdown()
        shutil.rmtree(socket_dir, ignore_errors=True)
    return result


def _handler(roots: dict[str, str], result: dict, done: threading.Event):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path):
            root, _, rest = path.split("?", 1)[0].lstrip("/").partition("/")
            if root not in roots or ".." in rest.split("/"):
                return os.devnull + "-missing"
            return os.path.join(roots[root], rest)

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            result.update(json.loads(body))
            self.send_response(204)
            self.end_headers()
            done.set()

        def log_message(self, *args):
            pass

    Handler.extensions_map = {**Handler.extensions_map, ".mjs": "text/javascript",
                              ".wasm": "application/wasm"}
    return Handler
