//! The `keyhaven-app` binary: the tray app where there is a display, the headless engine and web
//! dashboard where there is none (see `keyhaven_app::run`).
//!
//! On Linux it first makes sure GTK and WebKitGTK start with the low-memory settings only the
//! environment can choose ([`LIGHT_ENV`]): they read it once, when they start, and a running
//! process cannot set its own environment safely (`set_var` is `unsafe` in Rust 2024, and this
//! workspace forbids `unsafe`). So when one is missing the binary re-executes itself once, same
//! pid, arguments and `argv[0]`, with it added, before any thread or library has started. A
//! variable already set (by the user, or by the first pass) is left as it is.

#![cfg_attr(all(not(debug_assertions), windows), windows_subsystem = "windows")]

/// `WEBKIT_DISABLE_COMPOSITING_MODE`: the dashboard is drawn without GPU compositing (under Xvfb
/// or in a VM that is Mesa's llvmpipe, about 85 MB of the web process); `GDK_GL=disable`: GTK
/// does not probe GLX when it opens the display, which loads Mesa (about 50 MB) into the app
/// even while no window exists. `…=0` / another `GDK_GL` value set by the user wins.
#[cfg(target_os = "linux")]
const LIGHT_ENV: [(&str, &str); 2] = [("WEBKIT_DISABLE_COMPOSITING_MODE", "1"), ("GDK_GL", "disable")];

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    light_env();
    keyhaven_app::main()
}

/// Re-executes the binary with [`LIGHT_ENV`] when part of it is missing; returns only when
/// nothing is missing or the exec failed (the app then runs with WebKit's defaults).
#[cfg(target_os = "linux")]
fn light_env() {
    use std::os::unix::process::CommandExt;
    let missing: Vec<(&str, &str)> = LIGHT_ENV.into_iter().filter(|(k, _)| std::env::var_os(k).is_none()).collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    // `exec` only returns on failure.
    let _ = command.args(args).envs(missing).exec();
}
