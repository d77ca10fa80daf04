//! The `keyhaven-app` binary: the tray app where there is a display, the headless engine and web
//! dashboard where there is none (see `keyhaven_app::run`).

#![cfg_attr(all(not(debug_assertions), windows), windows_subsystem = "windows")]

fn main() -> std::process::ExitCode {
    keyhaven_app::main()
}
