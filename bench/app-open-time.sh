#!/usr/bin/env bash
# How long the dashboard window takes to open, from outside: the tray app runs hidden; each round
# starts a second `keyhaven-app` (which hands over to the running one, as the tray's Open
# dashboard does), times it until a window named Keyhaven is mapped (xdotool) and, when the app
# logs it, until the dashboard's first control call reached the engine; then closes the window
# (WM_DELETE_WINDOW, as a window manager's close button) and waits for it to go.
#
#   bench/app-open-time.sh [APP_BINARY] [ROUNDS]      (default target/release/keyhaven-app, 6)
#
# Runs under Xvfb in a private D-Bus session with a throwaway HOME, data dir and port-0 config.
# Needs xvfb-run, dbus-run-session, gnome-keyring-daemon, python3, xdotool.
set -euo pipefail
APP="$(realpath "${1:-target/release/keyhaven-app}")"
ROUNDS="${2:-6}"
E2E="$(cd "$(dirname "$0")/../.ci/e2e" && pwd)"
# shellcheck source=bench/desktop-session.sh
source "$(dirname "$0")/desktop-session.sh"
desktop_session "$0" "$APP" "$ROUNDS"
now() { date +%s.%N; }
ms() { python3 -c "import sys; print(f'{(float(sys.argv[2]) - float(sys.argv[1])) * 1000:.0f} ms')" "$1" "$2"; }
mapped() { xdotool search --onlyvisible --name '^Keyhaven$' >/dev/null 2>&1; }
loaded() { grep -c 'dashboard window loaded' "$HOME/app.log" || true; }

"$APP" --hidden > "$HOME/app.log" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -s "$KEYHAVEN_DATA_DIR/control-token" ] && break; sleep 0.1; done
sleep 3
echo "dashboard open time ($(basename "$APP"), $(uname -m)), from a second start:"
for i in $(seq "$ROUNDS"); do
  t0=$(now)
  "$APP" >/dev/null 2>&1
  until mapped; do sleep 0.01; done
  t1=$(now)
  line="  open $i: window mapped after $(ms "$t0" "$t1")"
  # Builds whose window is its own process log its first control call; others do not.
  for _ in $(seq 500); do [ "$(loaded)" -ge "$i" ] && break; sleep 0.01; done
  [ "$(loaded)" -ge "$i" ] && line="$line, first control call after $(ms "$t0" "$(now)")"
  echo "$line"
  sleep 2
  python3 - "$E2E" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from common import close_window, window_ids
for xid in window_ids() or []:
    close_window(xid)
PY
  while mapped; do sleep 0.05; done
  sleep 2
done
kill -TERM "$pid"; wait "$pid" || true
