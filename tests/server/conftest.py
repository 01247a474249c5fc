"""conftest.py — starts real `tern serve` processes (on the tiny fixture model
unless told another) for the server tests. TERN_BIN and TERN_FIXTURES come from CTest (see
CMakeLists.txt); run by hand with them set, e.g.

  TERN_BIN=build/release/tern TERN_FIXTURES=tests/fixtures \
    tools/.venv-server/bin/python -m pytest tests/server
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

import pytest
import requests

BIN = os.environ.get("TERN_BIN", "build/release/tern")
FIXTURES = os.environ.get("TERN_FIXTURES", "tests/fixtures")
MODEL = os.path.join(FIXTURES, "models", "tiny-llama")


class Server:
    """A running `tern serve`; .url is http://127.0.0.1:PORT."""

    def __init__(self, *args, script=None, env=None, wait_ready=True, model=MODEL):
        self.script_file = None
        argv = [BIN, "serve", "--model", model, "--port", "0", *args]
        if script is not None:
            fd, self.script_file = tempfile.mkstemp(suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(script, f)
            argv += ["--test-script", self.script_file]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.log = []
        line = self.proc.stderr.readline()
        self.log.append(line)
        m = re.search(r"listening on http://([^:]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("tern serve did not start: " + line + self.proc.stderr.read())
        self.url = f"http://127.0.0.1:{m.group(2)}"
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if wait_ready:
            self.wait_ready()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            try:
                r = requests.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return
                assert r.status_code == 503, r.text
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("tern serve exited: " + "".join(self.log))
            time.sleep(0.05)
        raise RuntimeError("tern serve not ready: " + "".join(self.log))

    def wait_log(self, text, timeout=10):
        """True once a stderr line containing text has been read (the reader
        thread may lag the server by a moment)."""
        end = time.time() + timeout
        while time.time() < end:
            if any(text in line for line in list(self.log)):
                return True
            time.sleep(0.02)
        return False

    def stop(self, timeout=20):
        """SIGTERM; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("tern serve did not stop on SIGTERM")
        if self.script_file:
            os.unlink(self.script_file)
        return self.proc.returncode

    def metrics(self, headers=None):
        from prometheus_client.parser import text_string_to_metric_families
        r = requests.get(self.url + "/metrics", headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        out = {}
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                key = s.name + (json.dumps(s.labels, sort_keys=True) if s.labels else "")
                out[key] = s.value
        return out

    def wait_kv_free(self, timeout=5.0):
        """Waits until no KV block is in use and nothing runs; returns the metrics."""
        end = time.time() + timeout
        while True:
            m = self.metrics()
            if (m["tern_kv_blocks_used"] == 0 and m["tern_kv_blocks_free"] == m["tern_kv_blocks_total"]
                    and m["tern_requests_running"] == 0 and m["tern_requests_waiting"] == 0
                    and m["tern_requests_inflight"] == 0):
                return m
            if time.time() > end:
                raise AssertionError(f"KV blocks not returned: used={m['tern_kv_blocks_used']} "
                                     f"free={m['tern_kv_blocks_free']} total={m['tern_kv_blocks_total']} "
                                     f"running={m['tern_requests_running']} waiting={m['tern_requests_waiting']}")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    assert s.stop() == 0


@pytest.fixture
def make_server():
    made = []

    def make(*args, **kw):
        s = Server(*args, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        assert s.stop() == 0, "".join(s.log)


def sse_events(resp):
    """Data payloads of an SSE response (raw requests stream), and comments seen."""
    data, comments = [], []
    for line in resp.iter_lines(decode_unicode=True):
        if not line:
            continue
        if line.startswith(":"):
            comments.append(line)
        elif line.startswith("data: "):
            data.append(line[6:])
        else:
            raise AssertionError("not SSE: " + line)
    return data, comments
