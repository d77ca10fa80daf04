//! The desktop services the tray uses besides its icon: a desktop notification (budget alerts),
//! the clipboard (Copy endpoint URL) and single-instance hand-over (a second start opens the
//! running app's window and exits).
//!
//! On Linux they are written against what is already in the build: the session D-Bus through
//! the `dbus` crate (libdbus, which the keyring's Secret Service client links anyway) and GTK's
//! clipboard (GTK runs the tray). The Tauri plugins for the same three jobs brought two more
//! D-Bus stacks (zbus 5 and zbus 6, with their async runtime) and a Wayland and X11 clipboard
//! stack: 55 crates of a cold build. Elsewhere (macOS, Windows: configured, not built here) the
//! plugins do the work.
//!
//! The D-Bus names are those of the Desktop Notifications Specification and, for the hand-over,
//! the ones `tauri-plugin-single-instance` uses (`<identifier>.SingleInstance`, method
//! `org.SingleInstance.DBus.ExecuteCallback(as argv, s cwd)`), so a build with the plugin and a
//! build without it still find each other.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::{Claim, claim, copy_text, notify, plugins};

#[cfg(not(target_os = "linux"))]
mod plugins;
#[cfg(not(target_os = "linux"))]
pub use plugins::{Claim, claim, copy_text, notify, plugins};
