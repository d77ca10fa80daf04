#!/usr/bin/env python3
"""The tray menu end to end over D-Bus (no tray host needed): `com.canonical.dbusmenu` via
busctl, stdlib only.

Usage: tray_test.py APP_BINARY  inside a D-Bus session and a display, with KEYHAVEN_CONFIG /
KEYHAVEN_DATA_DIR and a throwaway HOME. Checks: the status line and the icon (its pixels, against `src-tauri/icons/`) follow the engine; Stop and
Start flip the engine (seen through its HTTP control API); the routing submenu switches the mode
and checks the current one; the "Restore clients on stop" item mirrors the setting; `--hidden`
starts no WebKit process; Open dashboard shows the window, in a process of its own; closing it
(WM_DELETE_WINDOW, as a window manager's close button) ends that process and its WebKit processes
while the app stays in the tray, whose own process never loaded Mesa or LLVM, and Open dashboard
builds it again; a killed window process takes only the window; Copy endpoint URL puts the gateway's URL on the clipboard
(read back by another X client, xclip); a second instance hands over and exits, and one started
while the first does not answer (SIGSTOP) exits 1 instead of running beside it; a budget passing its
warning threshold raises one desktop notification (the `Notify` call on
`org.freedesktop.Notifications`, seen by `dbus-monitor`: no notification server is needed); Quit
restores a routed client, exits with code 0 and leaves no process behind.
"""

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(__file__))
from common import Checks, descendants, close_window, processes, control_token, http_json, reachable, wait_for, window_ids  # noqa: E402

OBJ = "/org/ayatana/NotificationItem/tray_icon_tray_app_keyhaven/Menu"


def busctl(*args, check=True):
    r = subprocess.run(["busctl", "--user", *args], capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError(f"busctl {' '.join(args)}: {r.stderr.strip()}")
    return r


def find_service(pid):
    for line in busctl("list", "--no-legend").stdout.splitlines():
        cols = line.split()
        if len(cols) > 1 and cols[1] == str(pid):
            # The app also holds client connections (libdbus) that answer no call: skip those.
            try:
                r = subprocess.run(["busctl", "--user", "introspect", cols[0], OBJ], capture_output=True, timeout=3)
            except subprocess.TimeoutExpired:
                continue
            if r.returncode == 0:
                return cols[0]
    return None


def layout(svc):
    """{label: (id, props)} over the whole menu tree."""
    out = json.loads(busctl("--json=short", "--", "call", svc, OBJ, "com.canonical.dbusmenu", "GetLayout", "iias", "0", "-1", "0").stdout)
    items = {}

    def walk(node):
        node_id, props, children = node
        flat = {k: v["data"] for k, v in props.items()}
        if "label" in flat:
            items[flat["label"]] = (node_id, flat)
        for child in children:
            walk(child["data"])

    walk(out["data"][1])
    return items


def status_line(svc):
    return next((label for label in layout(svc) if label.startswith("Keyhaven:")), "")


def click(svc, label):
    item_id = layout(svc)[label][0]
    busctl("call", svc, OBJ, "com.canonical.dbusmenu", "Event", "isvu", str(item_id), "clicked", "i", "0", "0")


def checked(svc, label):
    return layout(svc)[label][1].get("toggle-state") == 1


def children(pid):
    """PIDs under `pid` at any depth (the window's process and its WebKit web and network processes)."""
    return list(descendants(pid))


def window_process(pid):
    """The PID of the app's window process (`keyhaven-app --window`, a direct child), or None."""
    return next((p for p, (parent, _, argv) in processes().items() if parent == pid and b"--window" in argv), None)


def loaded_graphics(pid):
    """The graphics-driver libraries mapped into `pid` (Mesa's DRI driver, its EGL, LLVM)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            names = {line.split()[-1].rsplit("/", 1)[-1] for line in f if "/" in line}
    except OSError:
        return ["(maps unreadable)"]
    return sorted(n for n in names if "_dri.so" in n or n.startswith("libLLVM") or n.startswith("libEGL_mesa"))


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def visible_windows():
    """How many mapped windows are named Keyhaven (xdotool), or None without xdotool."""
    try:
        r = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "^Keyhaven$"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return None
    return len(r.stdout.split())


def webkit_children(pid):
    """The names (`comm`, cut at 15 bytes: `WebKitWebProces`, `WebKitNetworkPr`) of the WebKit processes under `pid`."""
    return sorted(name for name in descendants(pid).values() if name.startswith("WebKit"))


def enabled(svc, label):
    return layout(svc)[label][1].get("enabled", True)


CLAUDE_BEFORE = '{\n  // mine\n  "theme": "dark"\n}\n'

# One Chat completion of 1000 input and 100 output tokens: at $10 / $30 per million, $0.013, which
# is 65 % of the $0.02 budget below (past its 50 % warning, short of the limit).
COMPLETION = {
    "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
}
BUDGET_CONFIG = """
[[providers]]
name = "mock"
kind = "openai"
base_url = "http://127.0.0.1:{port}/v1"
key = "env:KEYHAVEN_E2E_KEY"

[[models]]
name = "e2e-model"
provider = "mock"
upstream = "m"
price = {{ input = "10.00", output = "30.00", cache_read = "1.00", cache_write = "10.00" }}

[[budgets]]
name = "e2e-daily"
period = "day"
limit_usd = 0.02
soft_percent = 50
"""
NOTICE = "Keyhaven budget \u201ce2e-daily\u201d at 65 %"


class Upstream(BaseHTTPRequestHandler):
    """The provider: every POST gets COMPLETION, as one JSON body or, when the request asks to
    stream, as Chat Completions SSE chunks with the usage in the last one."""

    def do_POST(self):  # noqa: N802 - http.server's name
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if request.get("stream"):
            head = {k: COMPLETION[k] for k in ("id", "created", "model")}
            chunks = [
                {**head, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
                {**head, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": COMPLETION["usage"]},
            ]
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"
            kind = "text/event-stream"
        else:
            body = json.dumps(COMPLETION).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ITEM = "/org/ayatana/NotificationItem/tray_icon_tray_app_keyhaven"
ICONS = os.path.join(os.path.dirname(__file__), "..", "..", "src-tauri", "icons")


def png_pixels(path):
    """(width, height, RGBA bytes) of an 8-bit RGBA, non-interlaced PNG (stdlib only)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, color, interlace) == (8, 6, 0), f"unsupported PNG {depth=} {color=} {interlace=}"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, out, prev = zlib.decompress(idat), width * 4, bytearray(), bytearray(width * 4)
    for y in range(height):
        kind, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - 4] if i >= 4 else 0
            b, c = prev[i], (prev[i - 4] if i >= 4 else 0)
            if kind == 1:
                row[i] = (row[i] + a) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + b) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out += row
        prev = row
    return width, height, bytes(out)


def tray_icon(svc):
    """The pixels of the icon the tray shows (the StatusNotifierItem's IconName is a PNG file)."""
    r = busctl("--json=short", "get-property", svc, ITEM, "org.kde.StatusNotifierItem", "IconName")
    return png_pixels(json.loads(r.stdout)["data"])


def shows_icon(svc, name):
    """Whether the tray shows the pixels of src-tauri/icons/<name>.png."""
    try:
        return tray_icon(svc) == png_pixels(os.path.join(ICONS, f"{name}.png"))
    except (OSError, RuntimeError, AssertionError, KeyError, ValueError):
        return False


def clipboard_text():
    """The CLIPBOARD selection as another X client reads it (xclip), or None."""
    try:
        r = subprocess.run(["xclip", "-o", "-selection", "clipboard"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def notify_summaries(path):
    """The summary (4th argument) of each Notify call in a dbus-monitor log."""
    out = []
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if "member=Notify" in line:
            strings = [x.strip() for x in lines[i + 1:i + 6] if x.strip().startswith("string ")]
            if len(strings) >= 3:
                out.append(json.loads(strings[2].removeprefix("string ")))
    return out


def main():
    binary = os.path.abspath(sys.argv[1])
    data_dir = os.environ["KEYHAVEN_DATA_DIR"]
    home = os.environ["HOME"]
    c = Checks("tray")
    artifacts = os.environ.get("E2E_ARTIFACTS", "target/e2e-artifacts")
    log_path = os.path.join(artifacts, "tray-app.log")
    log = open(log_path, "w")

    def log_text():
        log.flush()
        with open(log_path, errors="replace") as f:
            return f.read()

    # A provider on loopback and a budget the first call takes past its warning threshold.
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    with open(os.environ["KEYHAVEN_CONFIG"], "a") as f:
        f.write(BUDGET_CONFIG.format(port=upstream.server_address[1]))
    os.environ["KEYHAVEN_E2E_KEY"] = "sk-e2e"
    monitor_log = os.path.join(artifacts, "tray-notifications.log")
    monitor = subprocess.Popen(
        ["dbus-monitor", "--session", "type='method_call',interface='org.freedesktop.Notifications'"],
        stdout=open(monitor_log, "w"), stderr=subprocess.STDOUT,
    )
    app = subprocess.Popen([binary, "--hidden"], stdout=log, stderr=subprocess.STDOUT)
    try:
        svc = wait_for(lambda: find_service(app.pid), timeout=30)
        if not c.check("the tray menu is exported on the session bus", svc is not None):
            return c.summary()
        line = wait_for(lambda: (lambda s: s if s.startswith("Keyhaven: running on ") else None)(status_line(svc)), timeout=30)
        c.check("the status line says running", line is not None, status_line(svc))
        c.check("the tray shows the running icon (its pixels)", wait_for(lambda: shows_icon(svc, "tray-running"), timeout=10))
        url = "http://" + line.removeprefix("Keyhaven: running on ") if line else ""
        token = control_token(data_dir)
        status, body = http_json("GET", f"{url}/api/status", token=token)
        c.check("the engine named in the tray answers", status == 200 and body["gatewayUrl"] == url, repr(body)[:200])
        c.check("Start is disabled and Stop enabled while running", not enabled(svc, "Start") and enabled(svc, "Stop"))
        c.check("--hidden starts no WebKit process", webkit_children(app.pid) == [], repr(webkit_children(app.pid)))
        status, body = http_json("POST", f"{url}/v1/chat/completions", {"model": "e2e-model", "messages": [{"role": "user", "content": "hi"}]})
        c.check("a priced call through the gateway (takes the budget to 65 %)", status == 200, repr(body)[:300])
        opened = False
        if visible_windows() is not None or os.environ.get("KEYHAVEN_REQUIRE_TOOLS") == "1":
            c.check("--hidden starts in the tray without a window", visible_windows() == 0, repr(visible_windows()))
            click(svc, "Open dashboard")
            c.check("Open dashboard shows the window", wait_for(lambda: visible_windows() == 1, timeout=15), repr(visible_windows()))
            web = wait_for(lambda: any(n.startswith("WebKitWebProc") for n in webkit_children(app.pid)), timeout=15)
            c.check("the open window has its WebKit web process", web, repr(webkit_children(app.pid)))
            shown = window_process(app.pid)
            c.check("the window runs in its own process (keyhaven-app --window)", shown is not None and webkit_children(shown) != [],
                    repr(descendants(app.pid)))
            loaded = wait_for(lambda: log_text().count("dashboard window loaded") == 1, timeout=30)
            c.check("…whose dashboard reaches the engine through the window's pipe", loaded, repr(log_text().count("dashboard window loaded")))

            # Close → reopen: the window is destroyed with its WebKit processes, then built again.
            for xid in window_ids() or []:
                close_window(xid)
            c.check("closing the window unmaps it", wait_for(lambda: visible_windows() == 0, timeout=15), repr(visible_windows()))
            gone = wait_for(lambda: webkit_children(app.pid) == [], timeout=30)
            c.check("closing the window ends its WebKit web and network processes", gone, repr(webkit_children(app.pid)))
            c.check("…and its own process", shown is not None and not alive(shown) and window_process(app.pid) is None, repr(descendants(app.pid)))
            c.check("the tray app's process never loaded the graphics driver (Mesa, LLVM)", loaded_graphics(app.pid) == [], repr(loaded_graphics(app.pid)))
            c.check("the app stays in the tray with the engine running", app.poll() is None and status_line(svc).startswith("Keyhaven: running on "), status_line(svc))
            click(svc, "Open dashboard")
            c.check("Open dashboard after a close builds the window again", wait_for(lambda: visible_windows() == 1, timeout=15), repr(visible_windows()))
            web = wait_for(lambda: any(n.startswith("WebKitWebProc") for n in webkit_children(app.pid)), timeout=15)
            c.check("…with a new WebKit web process", web, repr(webkit_children(app.pid)))
            # The app logs a window process's first control call: the reopened dashboard's script
            # ran and reached the engine through the window's pipe.
            loaded = wait_for(lambda: log_text().count("dashboard window loaded") == 2, timeout=30)
            c.check("…whose dashboard reaches the engine (its first control call served)", loaded, repr(log_text().count("dashboard window loaded")))

            # A crash of the window's process (WebKit, the graphics driver) leaves the engine alone.
            crashed = window_process(app.pid)
            if crashed is not None:
                os.kill(crashed, signal.SIGKILL)
            c.check("a killed window process takes only the window", crashed is not None
                    and wait_for(lambda: visible_windows() == 0 and webkit_children(app.pid) == [], timeout=30)
                    and app.poll() is None and reachable(url), repr(descendants(app.pid)))
            click(svc, "Open dashboard")
            c.check("…and Open dashboard brings it back", wait_for(lambda: visible_windows() == 1, timeout=15)
                    and wait_for(lambda: log_text().count("dashboard window loaded") == 3, timeout=30), repr(visible_windows()))
            opened = True

        # Stop / Start.
        click(svc, "Stop")
        stopped = wait_for(lambda: status_line(svc) == "Keyhaven: stopped", timeout=30)
        c.check("Stop stops the engine (status line, closed port)", stopped and not reachable(url), status_line(svc))
        c.check("…and the tray shows the stopped icon", wait_for(lambda: shows_icon(svc, "tray-stopped"), timeout=10))
        c.check("the routing submenu is disabled while stopped", not enabled(svc, "Local"))
        click(svc, "Start")
        line = wait_for(lambda: (lambda s: s if s.startswith("Keyhaven: running on ") else None)(status_line(svc)), timeout=30)
        url = "http://" + line.removeprefix("Keyhaven: running on ") if line else ""
        c.check("Start starts it again", bool(line) and reachable(url), status_line(svc))

        # Copy endpoint URL: another X client (xclip) reads it off the clipboard.
        click(svc, "Copy endpoint URL")
        copied = wait_for(lambda: (lambda t: t if t == f"{url}/v1" else None)(clipboard_text()), timeout=10)
        c.check("Copy endpoint URL puts the gateway's /v1 URL on the clipboard", copied is not None, repr(clipboard_text()))

        # Routing mode submenu.
        click(svc, "Upstream (official service)")
        mode = wait_for(lambda: http_json("GET", f"{url}/api/routing", token=token)[1]["mode"] == "upstream", timeout=15)
        c.check("Routing mode → Upstream switches the engine", mode)
        c.check("…and only Upstream is checked", wait_for(lambda: checked(svc, "Upstream (official service)") and not checked(svc, "Local") and not checked(svc, "Hybrid"), timeout=10))
        click(svc, "Local")
        mode = wait_for(lambda: http_json("GET", f"{url}/api/routing", token=token)[1]["mode"] == "local", timeout=15)
        c.check("Routing mode → Local switches it back", mode and wait_for(lambda: checked(svc, "Local"), timeout=10))
        # A change made elsewhere (the window) shows after the next refresh; the tray follows the engine.

        # Single instance: a second start hands over to this one and exits.
        second = subprocess.run([binary], stdout=log, stderr=subprocess.STDOUT, timeout=30)
        c.check("a second instance exits with code 0 and the first keeps running", second.returncode == 0 and app.poll() is None, f"rc={second.returncode}")
        # A first instance that holds the name but does not answer (stopped): the new start must
        # not run a second engine on the same data; it exits 1 and says why.
        os.kill(app.pid, signal.SIGSTOP)
        try:
            frozen = subprocess.run([binary], capture_output=True, text=True, timeout=60)
        finally:
            os.kill(app.pid, signal.SIGCONT)
        log.write(frozen.stdout + frozen.stderr)
        c.check("a start while the running instance does not answer exits 1 and says so",
                frozen.returncode == 1 and "already running but did not answer" in frozen.stderr,
                f"rc={frozen.returncode} {frozen.stderr[-300:]!r}")
        c.check("…and the running instance carries on", wait_for(lambda: reachable(url), timeout=15) and app.poll() is None)

        # Restore on stop, through the tray item; then Quit puts the routed client back.
        os.makedirs(os.path.join(home, ".claude"), exist_ok=True)
        settings = os.path.join(home, ".claude", "settings.json")
        with open(settings, "w") as f:
            f.write(CLAUDE_BEFORE)
        status, body = http_json("POST", f"{url}/api/clients/claudeCode/route", token=token)
        with open(settings) as f:
            routed = "ANTHROPIC_BASE_URL" in f.read()
        c.check("Claude Code routed through the control API", status == 200 and routed, repr(body)[:200])
        click(svc, "Restore clients on stop")
        on = wait_for(lambda: http_json("GET", f"{url}/api/settings", token=token)[1]["restoreOnStop"] is True, timeout=15)
        c.check("Restore clients on stop → the setting is on and the item checked", on and wait_for(lambda: checked(svc, "Restore clients on stop"), timeout=10))

        # The tray polls the budgets every 30 s; the alert is shown once, however many polls see it.
        shown = wait_for(lambda: NOTICE in notify_summaries(monitor_log), timeout=45)
        c.check("the budget's warning is one desktop notification", shown and notify_summaries(monitor_log).count(NOTICE) == 1,
                repr(notify_summaries(monitor_log)))

        kids = children(app.pid)
        if opened:
            c.check("the app has its WebKit helper processes", len(kids) > 0, repr(kids))
        click(svc, "Quit")
        try:
            code = app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        c.check("Quit exits with code 0", code == 0, f"code={code}")
        c.check("Quit closed the engine's port", not reachable(url))
        with open(settings) as f:
            c.check("Quit restored Claude Code's settings byte for byte", f.read() == CLAUDE_BEFORE)
        left = wait_for(lambda: not any(alive(k) for k in kids), timeout=10)
        c.check("no process is left behind (app and its WebKit helpers)", code is not None and left, repr([k for k in kids if alive(k)]))
    except Exception as e:  # noqa: BLE001 - any failure is a failed check
        c.check("the tray test ran to the end", False, str(e)[:500])
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        monitor.terminate()
        monitor.wait()
        upstream.shutdown()
        log.close()
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
