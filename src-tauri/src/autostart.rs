//! Start on login through tauri-plugin-autostart (an XDG autostart entry on Linux, a launch
//! agent on macOS, the Run key on Windows), launched with `--hidden`. Off until the user turns it
//! on in Settings; the OS entry is the only record of the choice.

use keyhaven::app::supervisor::Autostart;
use tauri::{AppHandle, Runtime};
use tauri_plugin_autostart::ManagerExt;

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
