//! Start on login. Through tauri-plugin-autostart (an XDG autostart entry on Linux, a launch
//! agent on macOS, the Run key on Windows), launched with `--hidden`; off until the user turns it
//! on in Settings, and the OS entry is the only record of the choice.
//!
//! The `.deb` also installs a system-wide entry, `/etc/xdg/autostart/Keyhaven.desktop`, so an
//! installed Keyhaven starts in the tray on login like other tray apps. The XDG autostart rules
//! say a user's own entry of the same file name replaces the system one, and one with
//! `Hidden=true` turns it off; [`Xdg`] follows them, so the Settings switch keeps working: off
//! writes that hiding entry, on removes it (or, with no system entry, asks the plugin as before).

use std::path::{Path, PathBuf};

use keyhaven::app::supervisor::Autostart;
use tauri::{AppHandle, Runtime};
use tauri_plugin_autostart::ManagerExt;

#[cfg(test)]
mod tests;

/// The entry's file name, system-wide and the user's (the plugin's is named after the app, so
/// `lib.rs` gives the plugin this name too).
pub const ENTRY_NAME: &str = "Keyhaven";

/// The plugin's switch.
pub struct Login<R: Runtime>(pub AppHandle<R>);

impl<R: Runtime> Autostart for Login<R> {
    fn is_enabled(&self) -> Result<bool, String> {
        self.0.autolaunch().is_enabled().map_err(|e| e.to_string())
    }

    fn set_enabled(&self, on: bool) -> Result<(), String> {
        let manager = self.0.autolaunch();
        if on { manager.enable() } else { manager.disable() }.map_err(|e| e.to_string())
    }
}

/// The user's entry that turns a system-wide one off (`Hidden=true`: "the entry does not exist").
const HIDING_ENTRY: &str = "[Desktop Entry]\nType=Application\nName=Keyhaven\nHidden=true\n";

/// XDG autostart with a system-wide entry in mind. `inner` is used only where no system entry
/// exists (a build run from a checkout).
pub struct Xdg<A> {
    pub inner: A,
    /// `$XDG_CONFIG_HOME/autostart` (usually `~/.config/autostart`).
    pub user_dir: PathBuf,
    /// `<dir>/autostart` for each of `$XDG_CONFIG_DIRS` (usually `/etc/xdg`).
    pub system_dirs: Vec<PathBuf>,
}

impl<A: Autostart> Xdg<A> {
    fn file_name() -> String {
        format!("{ENTRY_NAME}.desktop")
    }

    fn user_entry(&self) -> PathBuf {
        self.user_dir.join(Self::file_name())
    }

    /// The first system entry that is not itself hidden.
    fn system_entry(&self) -> Option<PathBuf> {
        self.system_dirs
            .iter()
            .map(|d| d.join(Self::file_name()))
            .find(|p| std::fs::read_to_string(p).is_ok_and(|text| !hides(&text)))
    }
}

/// Whether an entry's text turns it off: `Hidden=true`, or GNOME's `X-GNOME-Autostart-enabled=false`.
fn hides(text: &str) -> bool {
    text.lines().map(str::trim).any(|l| {
        matches!(l.split_once('='), Some((k, v)) if (k.trim() == "Hidden" && v.trim() == "true")
            || (k.trim() == "X-GNOME-Autostart-enabled" && v.trim() == "false"))
    })
}

fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

impl<A: Autostart> Autostart for Xdg<A> {
    fn is_enabled(&self) -> Result<bool, String> {
        if self.system_entry().is_none() {
            return self.inner.is_enabled();
        }
        // The user's entry of the same name, if any, replaces the system one.
        Ok(read(&self.user_entry())?.is_none_or(|text| !hides(&text)))
    }

    fn set_enabled(&self, on: bool) -> Result<(), String> {
        if self.system_entry().is_none() {
            return self.inner.set_enabled(on);
        }
        let user = self.user_entry();
        if on {
            // Without the user's entry the system one applies.
            match std::fs::remove_file(&user) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(format!("cannot remove {}: {e}", user.display())),
            }
        } else {
            std::fs::create_dir_all(&self.user_dir)
                .and_then(|()| std::fs::write(&user, HIDING_ENTRY))
                .map_err(|e| format!("cannot write {}: {e}", user.display()))
        }
    }
}
