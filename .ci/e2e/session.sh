#!/usr/bin/env bash
# The app's end-to-end tests in one private session. Run as
#   xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- bash .ci/e2e/session.sh target/debug/keyhaven-app
# Throwaway HOME (keyring, WebKit storage, client configs) and data dir, ports chosen by the OS:
# never the user's own files. Ends with one summary line.
set -euo pipefail
APP="$(realpath "$1")"
HERE="$(cd "$(dirname "$0")" && pwd)"
export E2E_ARTIFACTS="${E2E_ARTIFACTS:-$PWD/target/e2e-artifacts}"
mkdir -p "$E2E_ARTIFACTS"
export HOME="$(mktemp -d)"
printf 'keyhaven-e2e' | gnome-keyring-daemon --components=secrets --daemonize --unlock >/dev/null

config() {  # a fresh data dir and config: gateway and proxy on port 0
  export KEYHAVEN_DATA_DIR="$HOME/$1-data" KEYHAVEN_CONFIG="$HOME/$1-config.toml"
  printf '[server]\nlisten = "127.0.0.1:0"\n\n[proxy]\nenabled = true\nlisten = "127.0.0.1:0"\n' > "$KEYHAVEN_CONFIG"
}

failed=0
# The window, through WebKitWebDriver (the app inherits the driver's environment).
config window
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# WebKitGTK 2.50's WebDriver screenshot hangs when the app draws without GL (the app's own
# WEBKIT_DISABLE_COMPOSITING_MODE=1 and GDK_GL=disable, src-tauri/src/main.rs), so this run keeps
# GL on by setting both itself; the tray run below uses the app's own settings.
WEBKIT_DISABLE_COMPOSITING_MODE=0 GDK_GL="" TAURI_WEBVIEW_AUTOMATION=true WebKitWebDriver --port="$port" > "$E2E_ARTIFACTS/webkitwebdriver.log" 2>&1 &
driver=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/status" >/dev/null && break; sleep 0.1; done
WD_URL="http://127.0.0.1:$port" python3 "$HERE/webdriver_test.py" "$APP" || failed=1
kill "$driver" 2>/dev/null || true
wait "$driver" 2>/dev/null || true
# The session's app must be gone before the tray test (one instance at a time).
for _ in $(seq 100); do pgrep -xf "$APP" >/dev/null || break; sleep 0.1; done

# The tray, over D-Bus.
config tray
python3 "$HERE/tray_test.py" "$APP" || failed=1

if [ "$failed" = 0 ]; then echo "e2e: 2 passed, 0 failed"; else echo "e2e: failed (see above)"; exit 1; fi
