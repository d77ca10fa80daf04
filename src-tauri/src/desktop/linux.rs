//! Linux: the session D-Bus (libdbus through the `dbus` crate) and GTK's clipboard.

use std::collections::HashMap;
use std::time::Duration;

use dbus::arg::{PropMap, RefArg, Variant};
use dbus::blocking::Connection;
use dbus::blocking::stdintf::org_freedesktop_dbus::RequestNameReply;
use dbus::channel::{MatchingReceiver as _, Sender as _};
use dbus::message::MatchRule;
use tauri::{AppHandle, Runtime};

/// The Desktop Notifications Specification's bus name, object and interface.
const NOTIFICATIONS: (&str, &str, &str) =
    ("org.freedesktop.Notifications", "/org/freedesktop/Notifications", "org.freedesktop.Notifications");
/// The hand-over's interface and method (as `tauri-plugin-single-instance` names them).
const HANDOVER: (&str, &str) = ("org.SingleInstance.DBus", "ExecuteCallback");
/// How long a D-Bus call may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The Tauri plugins this module replaces on Linux: none to add.
pub fn plugins<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder
}

/// Shows a desktop notification (`org.freedesktop.Notifications.Notify`), off the caller's
/// thread; a failure (no session bus, no notification server) is logged.
pub fn notify<R: Runtime>(_app: &AppHandle<R>, title: &str, body: &str) {
    let (title, body) = (title.to_owned(), body.to_owned());
    tauri::async_runtime::spawn_blocking(move || {
        if let Err(e) = send_notification(&title, &body) {
            tracing::warn!(error = %e, "desktop notification not shown");
        }
    });
}

fn send_notification(title: &str, body: &str) -> Result<u32, dbus::Error> {
    let connection = Connection::new_session()?;
    let (name, path, interface) = NOTIFICATIONS;
    let hints: PropMap = HashMap::<String, Variant<Box<dyn RefArg>>>::new();
    let actions: Vec<&str> = Vec::new();
    // app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout (-1: the
    // server's default).
    let (id,): (u32,) = connection.with_proxy(name, path, CALL_TIMEOUT).method_call(
        interface,
        "Notify",
        ("Keyhaven", 0u32, "keyhaven-app", title, body, actions, hints, -1i32),
    )?;
    Ok(id)
}

/// Puts `text` on the clipboard. GTK's clipboard belongs to the main thread, so the work is
/// queued there; GTK serves the text to other programs for as long as the app runs.
pub fn copy_text<R: Runtime>(app: &AppHandle<R>, text: String) {
    let queued = app.run_on_main_thread(move || {
        let clipboard = gtk::Clipboard::get(&gtk::gdk::SELECTION_CLIPBOARD);
        clipboard.set_text(&text);
    });
    if let Err(e) = queued {
        tracing::warn!(error = %e, "could not copy to the clipboard");
    }
}

/// The outcome of [`claim`].
pub enum Claim {
    /// This process is the first: it owns the name and serves the hand-over once [`Primary::serve`]
    /// is called.
    Primary(Primary),
    /// Another instance runs and accepted this one's arguments: this process should exit (0).
    HandedOver,
    /// Another instance holds the name but did not take the hand-over: this one must not start
    /// a second engine on the same data.
    Unanswered(String),
    /// There is no session bus (or it refused): other instances cannot be found, run anyway.
    Unavailable(String),
}

/// The first instance's D-Bus name, held for the life of the process.
pub struct Primary {
    connection: Connection,
    path: String,
}

/// Claims the single-instance name `<identifier>.SingleInstance` on the session bus, or hands
/// this start's arguments to the instance that owns it (and waits for it to accept them).
pub fn claim(identifier: &str) -> Claim {
    let name = format!("{identifier}.SingleInstance");
    let path = format!("/{}", name.replace('.', "/").replace('-', "_"));
    let connection = match Connection::new_session() {
        Ok(c) => c,
        Err(e) => return Claim::Unavailable(e.to_string()),
    };
    // Not queued, not replaceable: the first instance keeps the name until it exits. A second
    // try covers an owner that quit between the request and the hand-over (the name is free);
    // an owner that does not answer is not waited for twice.
    let mut unanswered = String::new();
    for _ in 0..2 {
        match connection.request_name(name.as_str(), false, false, true) {
            Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => {
                return Claim::Primary(Primary { connection, path });
            }
            Ok(RequestNameReply::Exists | RequestNameReply::InQueue) => match hand_over(&connection, &name, &path) {
                Ok(()) => return Claim::HandedOver,
                Err(e) if owner_gone(&e) => unanswered = e.to_string(),
                Err(e) => return Claim::Unanswered(e.to_string()),
            },
            Err(e) => return Claim::Unavailable(e.to_string()),
        }
    }
    Claim::Unanswered(unanswered)
}

/// Whether a failed hand-over failed because the name has no owner any more.
fn owner_gone(e: &dbus::Error) -> bool {
    matches!(e.name(), Some("org.freedesktop.DBus.Error.ServiceUnknown" | "org.freedesktop.DBus.Error.NameHasNoOwner"))
}

fn hand_over(connection: &Connection, name: &str, path: &str) -> Result<(), dbus::Error> {
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let cwd = std::env::current_dir().unwrap_or_default().to_string_lossy().into_owned();
    let (interface, member) = HANDOVER;
    connection.with_proxy(name, path, CALL_TIMEOUT).method_call::<(), _, _, _>(interface, member, (argv, cwd))
}

impl Primary {
    /// Answers hand-overs from later starts by calling `on_handover` (on a thread of its own that
    /// waits on the bus; it ends with the process, and the bus drops the name then).
    pub fn serve(self, on_handover: impl Fn() + Send + 'static) {
        let Primary { connection, path } = self;
        let (interface, member) = HANDOVER;
        let rule = MatchRule::new_method_call().with_interface(interface).with_member(member).with_path(path);
        connection.start_receive(
            rule,
            Box::new(move |call, conn| {
                let _ = conn.send(call.method_return());
                on_handover();
                true
            }),
        );
        let spawned = std::thread::Builder::new().name("single-instance".into()).spawn(move || {
            loop {
                if let Err(e) = connection.process(Duration::from_secs(60)) {
                    tracing::warn!(error = %e, "single-instance: the session bus went away");
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "single-instance: cannot wait for hand-overs");
        }
    }
}
