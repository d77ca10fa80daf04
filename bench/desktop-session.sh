# Sourced by the tray app's benchmarks (app-memory.sh, app-open-time.sh).
#
#   desktop_session "$0" ARGS...
#
# The first time, re-executes the calling script with ARGS under Xvfb in a private D-Bus session;
# inside it, gives the script a throwaway HOME with an unlocked gnome-keyring, a data dir and a
# config with the gateway and the proxy on port 0 (KEYHAVEN_DATA_DIR, KEYHAVEN_CONFIG).
desktop_session() {
  local script="$1"
  shift
  if [ -z "${KEYHAVEN_BENCH_SESSION:-}" ]; then
    export KEYHAVEN_BENCH_SESSION=1
    exec xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- bash "$script" "$@"
  fi
  HOME="$(mktemp -d)"
  export HOME
  printf 'keyhaven-bench' | gnome-keyring-daemon --components=secrets --daemonize --unlock >/dev/null
  export KEYHAVEN_DATA_DIR="$HOME/data" KEYHAVEN_CONFIG="$HOME/config.toml"
  printf '[server]\nlisten = "127.0.0.1:0"\n\n[proxy]\nenabled = true\nlisten = "127.0.0.1:0"\n' > "$KEYHAVEN_CONFIG"
}
