"""Shared helpers of the e2e scripts (stdlib only): HTTP to the engine's control API, checks
that count into one cargo-style summary line, polling."""

import json
import os
import sys
import time
import urllib.error
import urllib.request


class Checks:
    """Counts named checks; `summary()` prints `<label>: N passed, M failed` and returns the exit code."""

    def __init__(self, label):
        self.label = label
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name} {detail}", flush=True)
        return ok

    def summary(self):
        print(f"{self.label}: {self.passed} passed, {self.failed} failed", flush=True)
        return 0 if self.failed == 0 and self.passed > 0 else 1


def wait_for(fn, timeout=30.0, interval=0.2):
    """Calls `fn` until it returns a truthy value (returned) or the time is up (returns the last value)."""
    end = time.monotonic() + timeout
    value = None
    while True:
        try:
            value = fn()
        except Exception as e:  # noqa: BLE001 - polling tolerates transient failures
            value = None
            last = e
        if value:
            return value
        if time.monotonic() > end:
            return value
        time.sleep(interval)


def http_json(method, url, body=None, token=None, timeout=10):
    """(status, parsed JSON or None); raises URLError when nothing listens."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if method != "GET":
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, None


def reachable(url):
    try:
        http_json("GET", url + "/v1/models", timeout=2)
        return True
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def control_token(data_dir):
    with open(os.path.join(data_dir, "control-token")) as f:
        return f.read().strip()


def artifacts():
    path = os.environ.get("E2E_ARTIFACTS", "target/e2e-artifacts")
    os.makedirs(path, exist_ok=True)
    return path


def die(msg):
    print(msg, file=sys.stderr, flush=True)
    sys.exit(1)
