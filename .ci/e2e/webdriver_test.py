#!/usr/bin/env python3
"""The Tauri window end to end, driven through WebKitWebDriver (W3C WebDriver, stdlib only).

Usage: webdriver_test.py APP_BINARY  with WD_URL (WebKitWebDriver, started with
TAURI_WEBVIEW_AUTOMATION=true) and KEYHAVEN_CONFIG / KEYHAVEN_DATA_DIR in the environment (the
app inherits them from the driver). Checks: the dashboard loads (real elements are visible and
the engine bar says running); a command round-trips through the IPC transport and matches the
engine's HTTP control API; a setting saved in the window reaches the engine; Stop and Start
from the window flip the engine; after the window is closed (WM_DELETE_WINDOW, as a window
manager's close button) the window's process ends, and the WebDriver session with it (the
session lives in the window's process), while the tray app and engine keep running; a second
instance opens a new window; SIGTERM quits the tray app with its window.
Screenshots go to target/e2e-artifacts/.
"""

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from common import Checks, artifacts, close_window, control_token, http_json, processes, reachable, wait_for, window_ids  # noqa: E402

W3C_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def tray_app(binary):
    """The PID of the tray app (`binary` with no arguments), or None."""
    return next((p for p, (_, _, argv) in processes().items() if argv == [binary.encode()]), None)


def session_alive(wd):
    try:
        wd.s("GET", "/window/handles")
        return True
    except RuntimeError as e:
        if "invalid session id" in str(e):
            return False
        raise


class Session:
    def __init__(self, base, binary):
        self.base = base
        caps = {"capabilities": {"alwaysMatch": {"webkitgtk:browserOptions": {"binary": binary, "args": []}}}}
        self.id = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read().decode())["value"]
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode()[:300]}") from None

    def s(self, method, path, body=None):
        return self._call(method, f"/session/{self.id}{path}", body)

    def find(self, css):
        return self.s("POST", "/element", {"using": "css selector", "value": css})[W3C_ELEMENT]

    def text(self, css):
        return self.s("GET", f"/element/{self.find(css)}/text")

    def displayed(self, css):
        return self.s("GET", f"/element/{self.find(css)}/displayed")

    def click(self, css):
        return self.s("POST", f"/element/{self.find(css)}/click", {})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def js_async(self, script, *args):
        return self.s("POST", "/execute/async", {"script": script, "args": list(args)})

    def screenshot(self, name):
        time.sleep(0.5)  # a screenshot right after a DOM change can be stale
        png = base64.b64decode(self.s("GET", "/screenshot"))
        path = os.path.join(artifacts(), name)
        with open(path, "wb") as f:
            f.write(png)
        return path

    def close(self):
        try:
            self._call("DELETE", f"/session/{self.id}")
        except Exception as e:  # noqa: BLE001
            print(f"closing the session: {e}", flush=True)


INVOKE = """
const [method, path, body, done] = arguments;
window.__TAURI__.core.invoke('control', { method, path, body }).then(done, (e) => done({ status: -1, body: String(e) }));
"""


def main():
    binary = os.path.abspath(sys.argv[1])
    data_dir = os.environ["KEYHAVEN_DATA_DIR"]
    c = Checks("webdriver")
    wd = Session(os.environ.get("WD_URL", "http://127.0.0.1:4445"), binary)
    try:
        # The dashboard loads: the sidebar, a page heading, and the engine bar once the engine runs.
        brand = wait_for(lambda: wd.text(".sidebar .brand"), timeout=30)
        c.check("the dashboard's sidebar is visible", brand == "Keyhaven" and wd.displayed(".sidebar"), repr(brand))
        c.check("the Overview page renders", wait_for(lambda: wd.text("main h1") == "Overview", timeout=10))
        bar = wait_for(lambda: wd.js("return document.querySelector('.engine-bar')?.dataset.state") == "running", timeout=30)
        c.check("the engine bar says running", bar)
        c.check(
            "no token warning in the app window (IPC needs none)",
            wd.js("return document.querySelector('.notice.warn[role=alert]') === null"),
        )
        wd.screenshot("window-overview.png")

        # A command round-trips: status over the IPC transport equals the engine's HTTP answer.
        reply = wd.js_async(INVOKE, "GET", "/api/status", None)
        ok = isinstance(reply, dict) and reply.get("status") == 200
        c.check("control(GET /api/status) over IPC answers 200", ok, repr(reply)[:300])
        url = reply["body"]["gatewayUrl"] if ok else None
        token = control_token(data_dir)
        status, body = http_json("GET", f"{url}/api/status", token=token) if url else (0, None)
        c.check("the same engine answers over HTTP with the token", status == 200 and body["gatewayUrl"] == url, repr(body)[:200])

        # A change made through IPC is seen by the engine (and back).
        reply = wd.js_async(INVOKE, "PUT", "/api/routing", {"mode": "upstream"})
        status, body = http_json("GET", f"{url}/api/routing", token=token)
        c.check("routing mode set over IPC, read over HTTP", reply.get("status") == 200 and body["mode"] == "upstream", repr(body))
        reply = wd.js_async(INVOKE, "GET", "/api/no-such-route", None)
        c.check("an unknown route is a 404 {kind, message}", reply.get("status") == 404 and reply["body"]["kind"] == "not_found", repr(reply))

        # A setting saved in the window's Settings page reaches the engine's config.
        wd.js("location.hash = '#/settings'")
        wait_for(lambda: wd.displayed("#s-restoreOnStop"), timeout=15)
        before = wd.js("return document.getElementById('s-restoreOnStop').checked")
        wd.click("#s-restoreOnStop")
        wd.click("form.panel button[type=submit]")
        saved = wait_for(lambda: http_json("GET", f"{url}/api/settings", token=token)[1]["restoreOnStop"] == (not before), timeout=15)
        c.check("Settings → restore on stop saved through the window", saved)
        c.check("Settings shows the start-on-login switch in the app", wd.displayed("#s-startOnLogin"))
        wd.screenshot("window-settings.png")

        # Stop and Start from the window's engine bar.
        wd.click(".engine-bar button")
        stopped = wait_for(lambda: wd.js("return document.querySelector('.engine-bar')?.dataset.state") == "stopped", timeout=30)
        c.check("Stop in the window stops the engine", stopped and not reachable(url))
        reply = wd.js_async(INVOKE, "GET", "/api/status", None)
        c.check("while stopped, control calls answer 503 unavailable", reply.get("status") == 503 and reply["body"]["kind"] == "unavailable", repr(reply))
        wd.screenshot("window-stopped.png")
        wd.click(".engine-bar button")
        running = wait_for(lambda: wd.js("return document.querySelector('.engine-bar')?.dataset.state") == "running", timeout=30)
        reply = wd.js_async(INVOKE, "GET", "/api/app", None)
        new_url = reply.get("body", {}).get("gatewayUrl") if isinstance(reply, dict) else None
        c.check("Start in the window starts it again", running and new_url and reachable(new_url), repr(reply)[:200])

        # Close → reopen. The window is its own process, which ends with it, and WebKit's automation
        # session lives in that process: the session ends too. The tray app and its engine stay;
        # a second instance (as the tray's Open dashboard) starts a new window process.
        # (tray_test.py checks that the reopened dashboard reaches the engine.)
        ids = window_ids()
        c.check("the window is mapped (xdotool)", bool(ids), repr(ids))
        for xid in ids or []:
            close_window(xid)
        c.check("closing the window unmaps it", wait_for(lambda: window_ids() == [], timeout=15), repr(window_ids()))
        c.check("…and ends the window's process, and with it the WebDriver session", wait_for(lambda: not session_alive(wd), timeout=15))
        app = tray_app(binary)
        c.check("the tray app and its engine keep running", app is not None and reachable(new_url), f"pid={app}")
        second = subprocess.run([binary], capture_output=True, timeout=60)
        c.check("a second instance hands over (exit 0)", second.returncode == 0, f"rc={second.returncode}")
        c.check("…and the window is back", wait_for(lambda: len(window_ids() or []) == 1, timeout=30), repr(window_ids()))
    except Exception as e:  # noqa: BLE001 - any driver error is a failed check, not a traceback
        c.check("the WebDriver session ran to the end", False, str(e)[:500])
        try:
            wd.screenshot("window-failure.png")
        except Exception:  # noqa: BLE001
            pass
    finally:
        wd.close()
        # The session launched the tray app; with its session gone, WebKitWebDriver leaves it
        # running. SIGTERM quits it as a logout would (its window process goes with it).
        app = tray_app(binary)
        if app is not None:
            os.kill(app, signal.SIGTERM)
            c.check("the tray app quits on SIGTERM, window process and all", wait_for(lambda: tray_app(binary) is None and window_ids() == [], timeout=30))
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
