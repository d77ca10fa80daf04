"""Shared helpers of the e2e scripts (stdlib only): HTTP to the engine's control API, checks
that count into one cargo-style summary line, polling."""

import ctypes
import json
import os
import subprocess
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


def window_ids(name="^Keyhaven$"):
    """X window ids of the mapped windows with that name (xdotool), or None without xdotool."""
    try:
        r = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", name], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return None
    return [int(w) for w in r.stdout.split()]


class _ClientMessage(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("serial", ctypes.c_ulong),
        ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p),
        ("window", ctypes.c_ulong),
        ("message_type", ctypes.c_ulong),
        ("format", ctypes.c_int),
        ("l", ctypes.c_long * 5),
    ]


class _XEvent(ctypes.Union):
    _fields_ = [("xclient", _ClientMessage), ("pad", ctypes.c_long * 24)]


def close_window(xid):
    """Asks the window to close as a window manager's close button does: a WM_DELETE_WINDOW
    client message (ICCCM), through libX11 (Xvfb has no window manager)."""
    x11 = ctypes.cdll.LoadLibrary("libX11.so.6")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XInternAtom.restype = ctypes.c_ulong
    x11.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    x11.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long, ctypes.POINTER(_XEvent)]
    x11.XFlush.argtypes = [ctypes.c_void_p]
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    display = x11.XOpenDisplay(None)
    if not display:
        raise RuntimeError("cannot open the X display")
    try:
        event = _XEvent()
        event.xclient.type = 33  # ClientMessage
        event.xclient.window = xid
        event.xclient.message_type = x11.XInternAtom(display, b"WM_PROTOCOLS", 0)
        event.xclient.format = 32
        event.xclient.l[0] = x11.XInternAtom(display, b"WM_DELETE_WINDOW", 0)
        event.xclient.l[1] = 0  # CurrentTime
        if not x11.XSendEvent(display, xid, 0, 0, ctypes.byref(event)):
            raise RuntimeError(f"XSendEvent to window {xid} failed")
        x11.XFlush(display)
    finally:
        x11.XCloseDisplay(display)


def processes():
    """{pid: (ppid, comm, argv)} of the live (not zombie) processes, from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().rstrip(b"\0").split(b"\0")
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                out[int(entry)] = (int(fields[1]), stat.split("(", 1)[1].rsplit(")", 1)[0], argv)
    return out


def descendants(pid):
    """{pid: name} of the live processes under `pid`, at any depth (on Linux the window's own
    process, and under it the WebKit web and network processes)."""
    table = processes()
    out, frontier = {}, {pid}
    while frontier:
        frontier = {p for p, (parent, _, _) in table.items() if parent in frontier and p not in out}
        out.update({p: table[p][1] for p in frontier})
    return out
