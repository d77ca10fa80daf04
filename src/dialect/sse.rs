//! Server-sent events: the event type the stream codecs consume, and the writer they produce with.
//! Parsing the byte stream is left to the `eventsource-stream` crate in `provider`.

/// One parsed server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseEvent {
    pub fn new(event: Option<&str>, data: impl Into<String>) -> SseEvent {
        SseEvent { event: event.map(str::to_owned), data: data.into() }
    }
}

/// Appends one event to `out` in wire form. Multi-line data becomes several `data:` lines.
pub fn write_event(out: &mut String, event: Option<&str>, data: &str) {
    if let Some(event) = event {
        out.push_str("event: ");
        out.push_str(event);
        out.push('\n');
    }
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
}

/// An SSE comment line, used as a keep-alive toward clients while the upstream is silent.
pub const KEEPALIVE: &str = ": keepalive\n\n";

/// Parses a whole SSE text (a fixture) with the same parser `provider` uses on the wire.
#[cfg(test)]
pub fn parse_all(text: &str) -> Vec<SseEvent> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;

    let chunks = futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text.to_owned()))]);
    futures::executor::block_on(async {
        chunks
            .eventsource()
            .filter_map(|ev| async move { ev.ok() })
            .map(|ev| SseEvent { event: if ev.event == "message" { None } else { Some(ev.event) }, data: ev.data })
            .collect()
            .await
    })
}
