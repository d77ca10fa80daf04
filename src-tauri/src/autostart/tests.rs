//! The XDG rules with and without the system-wide entry the `.deb` installs.

use std::sync::Mutex;

use keyhaven::app::supervisor::Autostart;

use super::{Xdg, hides};

/// The plugin's switch, as a flag.
#[derive(Default)]
struct Plugin(Mutex<bool>);

impl Autostart for Plugin {
    fn is_enabled(&self) -> Result<bool, String> {
        Ok(*self.0.lock().map_err(|e| e.to_string())?)
    }
    fn set_enabled(&self, on: bool) -> Result<(), String> {
        *self.0.lock().map_err(|e| e.to_string())? = on;
        Ok(())
    }
}

fn xdg(root: &std::path::Path) -> Xdg<Plugin> {
    Xdg {
        inner: Plugin::default(),
        user_dir: root.join("home/autostart"),
        system_dirs: vec![root.join("etc/autostart")],
    }
}

const SYSTEM_ENTRY: &str = include_str!("../../packaging/autostart.desktop");

#[test]
fn without_a_system_entry_the_plugin_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = xdg(dir.path());
    assert_eq!(x.is_enabled(), Ok(false));
    x.set_enabled(true).expect("on");
    assert_eq!(x.is_enabled(), Ok(true));
    assert!(!x.user_dir.exists(), "the plugin writes its own entry; this layer writes none");
}

#[test]
fn the_system_entry_is_on_until_the_user_hides_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = xdg(dir.path());
    std::fs::create_dir_all(&x.system_dirs[0]).expect("mkdir");
    std::fs::write(x.system_dirs[0].join("Keyhaven.desktop"), SYSTEM_ENTRY).expect("write");
    assert_eq!(x.is_enabled(), Ok(true), "installed: starts on login");

    x.set_enabled(false).expect("off");
    let user = std::fs::read_to_string(x.user_dir.join("Keyhaven.desktop")).expect("the user's entry");
    assert!(user.contains("\nHidden=true\n"), "{user}");
    assert_eq!(x.is_enabled(), Ok(false));
    assert_eq!(x.inner.is_enabled(), Ok(false), "the plugin is not asked");

    x.set_enabled(true).expect("on");
    assert!(!x.user_dir.join("Keyhaven.desktop").exists(), "the hiding entry is gone");
    assert_eq!(x.is_enabled(), Ok(true));
    x.set_enabled(true).expect("on twice is fine");
}

#[test]
fn an_entry_the_plugin_wrote_counts_as_on_and_is_replaced_by_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = xdg(dir.path());
    std::fs::create_dir_all(&x.system_dirs[0]).expect("mkdir");
    std::fs::write(x.system_dirs[0].join("Keyhaven.desktop"), SYSTEM_ENTRY).expect("write");
    std::fs::create_dir_all(&x.user_dir).expect("mkdir");
    std::fs::write(
        x.user_dir.join("Keyhaven.desktop"),
        "[Desktop Entry]\nType=Application\nExec=/usr/bin/keyhaven-app --hidden\n",
    )
    .expect("write");
    assert_eq!(x.is_enabled(), Ok(true));
    x.set_enabled(false).expect("off");
    assert_eq!(x.is_enabled(), Ok(false));
}

#[test]
fn a_hidden_system_entry_is_no_system_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = xdg(dir.path());
    std::fs::create_dir_all(&x.system_dirs[0]).expect("mkdir");
    std::fs::write(x.system_dirs[0].join("Keyhaven.desktop"), "[Desktop Entry]\nX-GNOME-Autostart-enabled=false\n")
        .expect("write");
    assert_eq!(x.is_enabled(), Ok(false), "falls back to the plugin");
}

#[test]
fn hiding_keys() {
    assert!(hides("[Desktop Entry]\nHidden=true\n"));
    assert!(hides("[Desktop Entry]\nX-GNOME-Autostart-enabled = false\n"));
    assert!(!hides("[Desktop Entry]\nHidden=false\nX-GNOME-Autostart-enabled=true\n"));
    assert!(!hides(SYSTEM_ENTRY), "the packaged entry is on");
    assert!(SYSTEM_ENTRY.lines().any(|l| l == "Exec=keyhaven-app --hidden"), "{SYSTEM_ENTRY}");
}
