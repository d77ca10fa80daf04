#!/usr/bin/env bash
# Idle memory of the tray app: RSS and PSS of the app process and of its WebKit helper processes
# (WebKitWebProcess renders the dashboard, WebKitNetworkProcess serves it), with the window shown
# and with the app started hidden in the tray, plus the headless mode for comparison.
#
#   bench/app-memory.sh [APP_BINARY] [IDLE_SECONDS]      (default target/release/keyhaven-app, 20 s)
#
# Runs under Xvfb in a private D-Bus session with a throwaway HOME, data dir and port-0 config.
# Needs xvfb-run, dbus-run-session, gnome-keyring-daemon, python3, curl.
set -euo pipefail
APP="$(realpath "${1:-target/release/keyhaven-app}")"
IDLE="${2:-20}"
if [ -z "${KEYHAVEN_MEMORY_INNER:-}" ]; then
  export KEYHAVEN_MEMORY_INNER=1
  exec xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- bash "$0" "$APP" "$IDLE"
fi
export HOME="$(mktemp -d)"
printf 'keyhaven-bench' | gnome-keyring-daemon --components=secrets --daemonize --unlock >/dev/null
export KEYHAVEN_DATA_DIR="$HOME/data" KEYHAVEN_CONFIG="$HOME/config.toml"
printf '[server]\nlisten = "127.0.0.1:0"\n\n[proxy]\nenabled = true\nlisten = "127.0.0.1:0"\n' > "$KEYHAVEN_CONFIG"

# "name pid rss_kib pss_kib" for the process and its direct children.
measure() {
  python3 - "$1" <<'PY'
import os, sys
root = int(sys.argv[1])
def field(pid, name, f):
    try:
        for line in open(f"/proc/{pid}/{f}"):
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
pids = [root]
for e in os.listdir("/proc"):
    if e.isdigit():
        try:
            stat = open(f"/proc/{e}/stat").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == root:
            pids.append(int(e))
total_rss = total_pss = 0
for p in pids:
    name = open(f"/proc/{p}/comm").read().strip()
    rss, pss = field(p, "VmRSS", "status"), field(p, "Pss", "smaps_rollup")
    total_rss += rss; total_pss += pss
    print(f"  {name:<22} {rss/1024:8.1f} MB RSS {pss/1024:8.1f} MB PSS")
print(f"  {'total':<22} {total_rss/1024:8.1f} MB RSS {total_pss/1024:8.1f} MB PSS")
PY
}

run() {  # label, args...
  local label="$1"; shift
  rm -rf "$KEYHAVEN_DATA_DIR"
  "$APP" "$@" > "$HOME/app.log" 2>&1 &
  local pid=$!
  local token_file="$KEYHAVEN_DATA_DIR/control-token"
  for _ in $(seq 300); do [ -s "$token_file" ] && break; sleep 0.1; done
  sleep "$IDLE"
  echo "$label (after ${IDLE} s idle):"
  measure "$pid"
  kill -TERM "$pid"; wait "$pid" || true
}

echo "keyhaven-app idle memory ($(basename "$APP"), $(uname -m))"
run "window shown" 
run "hidden in the tray (--hidden)" --hidden
run "headless (--headless, engine + web dashboard)" --headless
