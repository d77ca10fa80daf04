//! The line protocol between the tray app and its window process: one JSON object per line,
//! over the window process's stdin (tray → window) and stdout (window → tray). Only the two
//! processes hold these pipes, so, like Tauri's IPC inside one process, the channel needs no
//! token: nothing else can write to it.
//!
//! The window sends `{"kind":"request","id":N,"method":…,"path":…,"body":…}` for each `control`
//! call; the tray answers `{"kind":"reply","id":N,"reply":{"status":…,"body":…}}`, in any order,
//! or asks the window to come to the front with `{"kind":"present"}`. When the tray app ends,
//! the window's stdin ends and the window process exits; when the window closes, its stdout
//! ends and the tray forgets it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use keyhaven::control::dto::IpcReply;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Window → tray.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ToTray {
    /// One `control(method, path, body)` call from the dashboard.
    Request { id: u64, method: String, path: String, body: Option<Value> },
}

/// Tray → window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ToWindow {
    /// The answer to the request with the same `id`.
    Reply { id: u64, reply: IpcReply },
    /// Show the window and bring it to the front (Open dashboard, a second instance).
    Present,
}

/// One message as a line. The protocol's types always serialize.
fn line<T: Serialize>(message: &T) -> String {
    let mut s = serde_json::to_string(message).unwrap_or_default();
    s.push('\n');
    s
}

/// A line's message. Anything before the first `{` is dropped: a library in the window process
/// that writes to stdout must not cost a request its answer.
fn parse<T: for<'de> Deserialize<'de>>(line: &str) -> Option<T> {
    let start = line.find('{')?;
    match serde_json::from_str(&line[start..]) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(error = %e, "ignored a line that is not a window-protocol message");
            None
        }
    }
}

/// What a request gets when the tray app cannot answer it (it is gone, or the pipe broke): the
/// same `unavailable` error `/api/` gives while the engine is stopped.
pub fn unavailable() -> IpcReply {
    IpcReply {
        status: 503,
        body: json!({ "kind": "unavailable", "message": "the Keyhaven tray app is not answering; open the dashboard again from its tray menu" }),
    }
}

/// The tray's side: serves the window's requests with `serve` (each on its own task, so a slow
/// call does not hold up the rest) and writes replies and whatever `outbox` carries to the
/// window. Returns when the window closes its stdout (it exited) or its stdin (it is exiting).
pub async fn serve_window<Rd, Wr, F, Fut>(
    from_window: Rd,
    to_window: Wr,
    outbox: (mpsc::UnboundedSender<ToWindow>, mpsc::UnboundedReceiver<ToWindow>),
    serve: F,
) where
    Rd: AsyncRead + Unpin,
    Wr: AsyncWrite + Unpin,
    F: Fn(String, String, Option<Value>) -> Fut,
    Fut: Future<Output = IpcReply> + Send + 'static,
{
    let (sender, mut receiver) = outbox;
    let mut to_window = to_window;
    let writer = async move {
        while let Some(message) = receiver.recv().await {
            if to_window.write_all(line(&message).as_bytes()).await.is_err() || to_window.flush().await.is_err() {
                break;
            }
        }
    };
    let reader = async move {
        // Calls in flight end with this function: their window is gone.
        let mut calls = JoinSet::new();
        let mut lines = BufReader::new(from_window).lines();
        while let Ok(Some(text)) = lines.next_line().await {
            while calls.try_join_next().is_some() {}
            let Some(ToTray::Request { id, method, path, body }) = parse(&text) else { continue };
            let call = serve(method, path, body);
            let sender = sender.clone();
            calls.spawn(async move {
                let _ = sender.send(ToWindow::Reply { id, reply: call.await });
            });
        }
    };
    tokio::select! {
        () = reader => {}
        () = writer => {}
    }
}

/// The window's side: sends `control` calls to the tray and matches the replies.
pub struct Link {
    to_tray: tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<IpcReply>>>,
    next_id: AtomicU64,
}

impl Link {
    pub fn new(to_tray: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        Self {
            to_tray: tokio::sync::Mutex::new(Box::new(to_tray)),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
        }
    }

    /// One `control` call, answered by the tray app, or [`unavailable`] when it cannot be.
    pub async fn request(&self, method: String, path: String, body: Option<Value>) -> IpcReply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, sender);
        }
        let text = line(&ToTray::Request { id, method, path, body });
        let sent = {
            let mut out = self.to_tray.lock().await;
            out.write_all(text.as_bytes()).await.is_ok() && out.flush().await.is_ok()
        };
        if !sent {
            self.forget(id);
            return unavailable();
        }
        receiver.await.unwrap_or_else(|_| unavailable())
    }

    fn forget(&self, id: u64) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&id);
        }
    }

    /// Reads the tray's messages until its end of the pipe closes; then every call still
    /// waiting is answered [`unavailable`].
    pub async fn listen(&self, from_tray: impl AsyncRead + Unpin, present: impl Fn()) {
        let mut lines = BufReader::new(from_tray).lines();
        while let Ok(Some(text)) = lines.next_line().await {
            match parse(&text) {
                Some(ToWindow::Reply { id, reply }) => {
                    let waiting = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(waiting) = waiting {
                        let _ = waiting.send(reply);
                    }
                }
                Some(ToWindow::Present) => present(),
                None => {}
            }
        }
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }
}

/// A window side and a tray side wired through in-memory pipes (tests): the returned link is
/// served by `serve`; `present` runs for each present the returned sender carries.
#[cfg(test)]
pub fn in_memory<F, Fut>(
    serve: F,
    present: impl Fn() + Send + 'static,
) -> (std::sync::Arc<Link>, mpsc::UnboundedSender<ToWindow>)
where
    F: Fn(String, String, Option<Value>) -> Fut + Send + 'static,
    Fut: Future<Output = IpcReply> + Send + 'static,
{
    let (window_out, tray_in) = tokio::io::duplex(64);
    let (tray_out, window_in) = tokio::io::duplex(64);
    let link = std::sync::Arc::new(Link::new(window_out));
    let outbox = mpsc::unbounded_channel();
    let sender = outbox.0.clone();
    tauri::async_runtime::spawn(serve_window(tray_in, tray_out, outbox, serve));
    let listening = link.clone();
    tauri::async_runtime::spawn(async move { listening.listen(window_in, present).await });
    (link, sender)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Wire format, written out by hand rather than taken from the types.
    #[test]
    fn messages_are_one_json_object_per_line() {
        let request = ToTray::Request { id: 7, method: "GET".into(), path: "/api/status".into(), body: None };
        assert_eq!(
            line(&request),
            "{\"kind\":\"request\",\"id\":7,\"method\":\"GET\",\"path\":\"/api/status\",\"body\":null}\n"
        );
        let reply = ToWindow::Reply { id: 7, reply: IpcReply { status: 200, body: json!({ "a": "x\ny" }) } };
        assert_eq!(
            line(&reply),
            "{\"kind\":\"reply\",\"id\":7,\"reply\":{\"status\":200,\"body\":{\"a\":\"x\\ny\"}}}\n"
        );
        assert_eq!(line(&ToWindow::Present), "{\"kind\":\"present\"}\n");
    }

    #[test]
    fn noise_before_a_message_is_dropped_and_garbage_is_ignored() {
        assert_eq!(parse::<ToWindow>("Gtk-Message: hi {\"kind\":\"present\"}"), Some(ToWindow::Present));
        assert_eq!(parse::<ToWindow>("{\"kind\":\"present\""), None);
        assert_eq!(parse::<ToWindow>("{\"kind\":\"launch\"}"), None);
        assert_eq!(parse::<ToWindow>(""), None);
        assert_eq!(parse::<ToTray>("{\"kind\":\"request\",\"id\":-1}"), None);
    }

    /// A link and a tray wired through in-memory pipes; the tray answers with the call itself,
    /// slowly for `/slow`.
    fn wired() -> (Arc<Link>, mpsc::UnboundedSender<ToWindow>, Arc<AtomicUsize>) {
        let presented = Arc::new(AtomicUsize::new(0));
        let p = presented.clone();
        let (link, sender) = in_memory(
            |method, path, body| async move {
                if path == "/slow" {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                IpcReply { status: 200, body: json!({ "method": method, "path": path, "body": body }) }
            },
            move || {
                p.fetch_add(1, Ordering::SeqCst);
            },
        );
        (link, sender, presented)
    }

    #[tokio::test]
    async fn replies_find_their_requests_in_any_order() {
        let (link, sender, presented) = wired();
        let big = "x".repeat(200_000);
        let (slow, fast, large) = tokio::join!(
            link.request("GET".into(), "/slow".into(), None),
            link.request("PUT".into(), "/fast".into(), Some(json!({ "n": 1 }))),
            link.request("POST".into(), "/large".into(), Some(json!(big))),
        );
        assert_eq!(slow.body["path"], "/slow");
        assert_eq!((fast.body["method"].clone(), fast.body["body"]["n"].clone()), (json!("PUT"), json!(1)));
        assert_eq!(large.body["body"].as_str().map(str::len), Some(200_000));
        sender.send(ToWindow::Present).expect("tray is serving");
        for _ in 0..100 {
            if presented.load(Ordering::SeqCst) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("present never arrived");
    }

    #[tokio::test]
    async fn a_gone_tray_answers_unavailable() {
        let (window_out, tray_in) = tokio::io::duplex(64);
        let (tray_out, window_in) = tokio::io::duplex(64);
        let link = Arc::new(Link::new(window_out));
        let l = link.clone();
        let listening = tokio::spawn(async move { l.listen(window_in, || {}).await });
        // The tray reads the request, then goes away without answering.
        let tray = tokio::spawn(async move {
            let mut lines = BufReader::new(tray_in).lines();
            let first = lines.next_line().await;
            drop(tray_out);
            first
        });
        let reply = link.request("GET".into(), "/api/status".into(), None).await;
        assert_eq!((reply.status, reply.body["kind"].clone()), (503, json!("unavailable")));
        assert!(tray.await.expect("tray task").expect("read").is_some_and(|l| l.contains("/api/status")));
        listening.await.expect("listen ends with the pipe");
        // Writing to a closed pipe is unavailable too, not a hang.
        let reply = link.request("GET".into(), "/api/status".into(), None).await;
        assert_eq!(reply.status, 503);
    }

    #[tokio::test]
    async fn the_tray_side_ends_when_the_window_goes() {
        let (window_out, tray_in) = tokio::io::duplex(64);
        let (tray_out, _window_in) = tokio::io::duplex(64);
        let serving = tokio::spawn(serve_window(tray_in, tray_out, mpsc::unbounded_channel(), |_, _, _| async {
            IpcReply { status: 200, body: Value::Null }
        }));
        drop(window_out);
        tokio::time::timeout(Duration::from_secs(5), serving).await.expect("ends").expect("no panic");
    }
}
