#!/usr/bin/env bash
# Idle memory of the tray app: RSS and PSS of the app process and of every process under it (on
# Linux the window's own process, `keyhaven-app --window`, and its WebKit helpers:
# WebKitWebProcess renders the dashboard, WebKitNetworkProcess serves it), with the window shown,
# with the app started hidden in the tray, and back in the tray after the window was shown and
# closed (a WM_DELETE_WINDOW message, as a window manager's close button sends), plus the headless
# mode for comparison.
#
#   bench/app-memory.sh [APP_BINARY] [IDLE_SECONDS]      (default target/release/keyhaven-app, 20 s)
#   KEYHAVEN_MEMORY_MAPS=N  also lists the app process's N largest resident mappings per state
#                           (file and permissions, from /proc/PID/smaps): what stays after a close.
#
# Runs under Xvfb in a private D-Bus session with a throwaway HOME, data dir and port-0 config.
# Needs xvfb-run, dbus-run-session, gnome-keyring-daemon, python3, curl, xdotool.
set -euo pipefail
APP="$(realpath "${1:-target/release/keyhaven-app}")"
E2E="$(cd "$(dirname "$0")/../.ci/e2e" && pwd)"
IDLE="${2:-20}"
# shellcheck source=bench/desktop-session.sh
source "$(dirname "$0")/desktop-session.sh"
desktop_session "$0" "$APP" "$IDLE"

# "name rss pss" for the process and every process under it (on Linux the window's own process,
# and under that the WebKit processes), and their total.
measure() {
  python3 - "$E2E" "$1" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from common import descendants
root = int(sys.argv[2])
def field(pid, name, f):
    try:
        for line in open(f"/proc/{pid}/{f}"):
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
pids = [root] + sorted(descendants(root))
total_rss = total_pss = 0
for p in pids:
    name = open(f"/proc/{p}/comm").read().strip()
    rss, pss = field(p, "VmRSS", "status"), field(p, "Pss", "smaps_rollup")
    total_rss += rss; total_pss += pss
    print(f"  {name:<22} {rss/1024:8.1f} MB RSS {pss/1024:8.1f} MB PSS")
print(f"  {'total':<22} {total_rss/1024:8.1f} MB RSS {total_pss/1024:8.1f} MB PSS")
PY
}

# "  MB perms file" for the N largest resident mappings of a process, summed per file and perms.
mappings() {
  python3 - "$1" "$2" <<'PY'
import collections, sys
pid, n = sys.argv[1], int(sys.argv[2])
rss = collections.Counter()
key = None
for line in open(f"/proc/{pid}/smaps"):
    parts = line.split()
    if parts and "-" in parts[0] and not parts[0].endswith(":"):
        key = (parts[5].rsplit("/", 1)[-1] if len(parts) > 5 else "[anon]", parts[1])
    elif parts and parts[0] == "Rss:" and key:
        rss[key] += int(parts[1])
for (name, perms), kib in rss.most_common(n):
    print(f"    {kib/1024:7.1f} MB {perms} {name}")
PY
}

# Closes the dashboard window the way a window manager does.
close_window() {
  python3 - "$E2E" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from common import close_window, window_ids
ids = window_ids()
if not ids:
    sys.exit("no Keyhaven window to close")
for xid in ids:
    close_window(xid)
PY
}

run() {  # label, close-after-idle (yes/no), args...
  local label="$1" close="$2"; shift 2
  rm -rf "$KEYHAVEN_DATA_DIR"
  "$APP" "$@" > "$HOME/app.log" 2>&1 &
  local pid=$!
  local token_file="$KEYHAVEN_DATA_DIR/control-token"
  for _ in $(seq 300); do [ -s "$token_file" ] && break; sleep 0.1; done
  sleep "$IDLE"
  if [ "$close" = yes ]; then close_window; sleep "$IDLE"; fi
  echo "$label (after ${IDLE} s idle):"
  measure "$pid"
  [ -z "${KEYHAVEN_MEMORY_MAPS:-}" ] || mappings "$pid" "$KEYHAVEN_MEMORY_MAPS"
  kill -TERM "$pid"; wait "$pid" || true
}

echo "keyhaven-app idle memory ($(basename "$APP"), $(uname -m))"
run "window shown" no
run "hidden in the tray (--hidden)" no --hidden
run "closed to the tray (shown, ${IDLE} s, closed)" yes
run "headless (--headless, engine + web dashboard)" no --headless
