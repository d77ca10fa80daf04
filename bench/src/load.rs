//! The load generators and their statistics.
//!
//! [`open_loop`] sends non-streaming requests on a fixed schedule (`rate` per second) whatever
//! the answers do, and measures each latency from the request's *scheduled* start to the end of
//! its body, so a stalled server shows up as latency instead of silently lowering the rate.
//! [`streaming`] sends a fixed number of streaming requests with bounded concurrency and records
//! the time to the first SSE `data:` line and the gaps between text deltas.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Where to send and which model to ask for.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub model: String,
    /// The request shape: OpenAI Chat (`/v1/chat/completions`) or Anthropic Messages
    /// (`/v1/messages`).
    pub anthropic: bool,
}

impl Target {
    /// An OpenAI Chat Completions target: `{base}/v1/chat/completions`.
    pub fn chat(base: &str, model: &str) -> Target {
        Target { url: format!("{base}/v1/chat/completions"), model: model.to_owned(), anthropic: false }
    }

    /// An Anthropic Messages target: `{base}/v1/messages`.
    pub fn anthropic(base: &str, model: &str) -> Target {
        Target { url: format!("{base}/v1/messages"), model: model.to_owned(), anthropic: true }
    }
}

/// Latencies in milliseconds plus an error tally.
#[derive(Debug, Default)]
pub struct Samples {
    pub latency_ms: Vec<f64>,
    /// `x-keyhaven-overhead-ms` values, when the answers carried the header.
    pub overhead_header_ms: Vec<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Samples {
    /// Adds another run's samples (a later slice of the same cell).
    pub fn merge(&mut self, other: Samples) {
        self.latency_ms.extend(other.latency_ms);
        self.overhead_header_ms.extend(other.overhead_header_ms);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }
}

/// Nearest-rank percentiles over a sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pcts {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Pcts {
    pub fn of(values: &[f64]) -> Pcts {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if v.is_empty() {
                return f64::NAN;
            }
            // Nearest rank: the smallest value with at least q of the sample at or below it.
            let rank = (q * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1]
        };
        Pcts { n: v.len(), p50: at(0.50), p95: at(0.95), p99: at(0.99), max: v.last().copied().unwrap_or(f64::NAN) }
    }
}

fn body(target: &Target, stream: bool) -> Vec<u8> {
    let model = &target.model;
    if target.anthropic {
        // Anthropic's Messages shape: `max_tokens` is required, the content may be a plain string.
        let v = json!({
            "model": model,
            "max_tokens": 32,
            "messages": [{"role": "user", "content": "Say hello in five words."}],
            "stream": stream,
        });
        return v.to_string().into_bytes();
    }
    let v = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello in five words."}],
        "max_tokens": 32,
        "stream": stream,
    });
    v.to_string().into_bytes()
}

/// The open-loop schedule both drivers share: `launch(scheduled, record)` is spawned `rate` times a
/// second for `warmup + duration` (missed ticks burst, so a driver behind schedule catches up and
/// the lateness counts as latency); `record` is false during the warm-up. Waits for the
/// stragglers (each bounded by the client's timeout).
async fn schedule<F, Fut>(rate: u32, warmup: Duration, duration: Duration, mut launch: F)
where
    F: FnMut(tokio::time::Instant, bool) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let start = tokio::time::Instant::now() + Duration::from_millis(10);
    let record_from = start + warmup;
    let end = record_from + duration;
    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let scheduled = ticks.tick().await;
        if scheduled >= end {
            break;
        }
        tasks.spawn(launch(scheduled, scheduled >= record_from));
        // Reap finished tasks as we go so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// Sends `rate` requests per second for `warmup + duration`; only those scheduled after the
/// warm-up are recorded. Waits for the stragglers (each bounded by the client's timeout).
pub async fn open_loop(
    client: &reqwest::Client,
    target: &Target,
    rate: u32,
    warmup: Duration,
    duration: Duration,
) -> Samples {
    let samples = Arc::new(Mutex::new(Samples::default()));
    let payload = bytes::Bytes::from(body(target, false));
    schedule(rate, warmup, duration, |scheduled, record| {
        let (client, url, payload, samples) = (client.clone(), target.url.clone(), payload.clone(), samples.clone());
        let anthropic = target.anthropic;
        async move {
            let result = one_request(&client, &url, payload, anthropic).await;
            if !record {
                return;
            }
            let latency = scheduled.elapsed().as_secs_f64() * 1000.0;
            let mut s = samples.lock().await;
            match result {
                Ok(overhead) => {
                    s.latency_ms.push(latency);
                    s.overhead_header_ms.extend(overhead);
                }
                Err(e) => s.error(e),
            }
        }
    })
    .await;
    Arc::try_unwrap(samples).map(Mutex::into_inner).unwrap_or_default()
}

/// One non-streaming request, body read to the end. Returns the overhead header if present.
async fn one_request(
    client: &reqwest::Client,
    url: &str,
    payload: bytes::Bytes,
    anthropic: bool,
) -> Result<Option<f64>, String> {
    let mut req = client.post(url).header("content-type", "application/json");
    if anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let resp = req.body(payload).send().await.map_err(|e| format!("send: {}", chain(&e)))?;
    let status = resp.status();
    let overhead =
        resp.headers().get("x-keyhaven-overhead-ms").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<f64>().ok());
    let text = resp.bytes().await.map_err(|e| format!("body: {}", chain(&e)))?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&text).chars().take(300).collect::<String>()));
    }
    Ok(overhead)
}

/// An error with its sources (reqwest's own message hides the cause: refused, reset, timeout).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Streaming results in milliseconds.
#[derive(Debug, Default)]
pub struct StreamSamples {
    /// Request sent → first SSE `data:` line.
    pub ttfb_ms: Vec<f64>,
    /// Gaps between consecutive text deltas.
    pub gap_ms: Vec<f64>,
    /// Request sent → `data: [DONE]`.
    pub total_ms: Vec<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl StreamSamples {
    /// Adds another run's samples (a later slice of the same cell).
    pub fn merge(&mut self, other: StreamSamples) {
        self.ttfb_ms.extend(other.ttfb_ms);
        self.gap_ms.extend(other.gap_ms);
        self.total_ms.extend(other.total_ms);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// `requests` streaming requests, at most `concurrency` at a time; each must deliver `chunks`
/// text deltas and `[DONE]`, or it counts as an error.
pub async fn streaming(
    client: &reqwest::Client,
    target: &Target,
    requests: u32,
    concurrency: usize,
    chunks: u32,
) -> StreamSamples {
    let payload = bytes::Bytes::from(body(target, true));
    let results: Vec<Result<OneStream, String>> = futures::stream::iter(0..requests)
        .map(|_| one_stream(client, &target.url, payload.clone(), chunks, None))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut out = StreamSamples::default();
    for r in results {
        match r {
            Ok(OneStream { ttfb, gaps, total }) => {
                out.ttfb_ms.push(ttfb);
                out.gap_ms.extend(gaps);
                out.total_ms.push(total);
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
            }
        }
    }
    out
}

/// Starts `rate` streaming requests per second for `warmup + duration` whatever the answers do
/// (open loop); only those started after the warm-up are recorded. Time to first byte is
/// measured from the request's *scheduled* start, so a server that falls behind shows up as
/// latency. Waits for the stragglers (each bounded by the client's timeout).
pub async fn open_loop_streaming(
    client: &reqwest::Client,
    target: &Target,
    rate: u32,
    warmup: Duration,
    duration: Duration,
    chunks: u32,
) -> StreamSamples {
    let samples = Arc::new(Mutex::new(StreamSamples::default()));
    let payload = bytes::Bytes::from(body(target, true));
    schedule(rate, warmup, duration, |scheduled, record| {
        let (client, url, payload, samples) = (client.clone(), target.url.clone(), payload.clone(), samples.clone());
        async move {
            let result = one_stream(&client, &url, payload, chunks, Some(scheduled.into_std())).await;
            if !record {
                return;
            }
            let mut s = samples.lock().await;
            match result {
                Ok(OneStream { ttfb, gaps, total }) => {
                    s.ttfb_ms.push(ttfb);
                    s.gap_ms.extend(gaps);
                    s.total_ms.push(total);
                }
                Err(e) => {
                    s.errors += 1;
                    s.first_error.get_or_insert(e);
                }
            }
        }
    })
    .await;
    Arc::try_unwrap(samples).map(Mutex::into_inner).unwrap_or_default()
}

/// One stream's timings in milliseconds.
struct OneStream {
    ttfb: f64,
    gaps: Vec<f64>,
    total: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn one_stream(
    client: &reqwest::Client,
    url: &str,
    payload: bytes::Bytes,
    chunks: u32,
    scheduled: Option<Instant>,
) -> Result<OneStream, String> {
    // Open-loop callers pass the scheduled start, so a driver or server behind schedule shows.
    let sent = scheduled.unwrap_or_else(Instant::now);
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(payload)
        .send()
        .await
        .map_err(|e| format!("send: {}", chain(&e)))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {}", text.chars().take(300).collect::<String>()));
    }
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut ttfb = None;
    let mut deltas: Vec<Instant> = Vec::new();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| format!("body: {}", chain(&e)))?;
        let now = Instant::now();
        buf.extend_from_slice(&piece);
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let Some(data) = line.strip_prefix(b"data:") else { continue };
            let data = data.trim_ascii();
            ttfb.get_or_insert(now - sent);
            if data == b"[DONE]" {
                if deltas.len() != chunks as usize {
                    return Err(format!("expected {chunks} text deltas, got {}", deltas.len()));
                }
                let gaps = deltas.windows(2).map(|w| ms(w[1] - w[0])).collect();
                return Ok(OneStream { ttfb: ttfb.map_or(f64::NAN, ms), gaps, total: ms(now - sent) });
            }
            let v: Value = serde_json::from_slice(data).map_err(|e| format!("bad chunk: {e}"))?;
            let text = v.pointer("/choices/0/delta/content").and_then(Value::as_str).unwrap_or("");
            if !text.is_empty() {
                deltas.push(now);
            }
        }
    }
    Err("stream ended without data: [DONE]".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_pool_their_samples_and_keep_the_first_error() {
        let mut a = Samples { latency_ms: vec![1.0, 2.0], overhead_header_ms: vec![0.1], errors: 0, first_error: None };
        a.merge(Samples {
            latency_ms: vec![3.0],
            overhead_header_ms: vec![],
            errors: 1,
            first_error: Some("503".into()),
        });
        a.merge(Samples {
            latency_ms: vec![],
            overhead_header_ms: vec![0.2],
            errors: 2,
            first_error: Some("timeout".into()),
        });
        assert_eq!((a.latency_ms, a.overhead_header_ms), (vec![1.0, 2.0, 3.0], vec![0.1, 0.2]));
        assert_eq!((a.errors, a.first_error.as_deref()), (3, Some("503")));

        let mut s =
            StreamSamples { ttfb_ms: vec![1.0], gap_ms: vec![5.0], total_ms: vec![100.0], ..Default::default() };
        s.merge(StreamSamples {
            ttfb_ms: vec![2.0],
            gap_ms: vec![6.0, 7.0],
            total_ms: vec![101.0],
            errors: 1,
            first_error: Some("cut".into()),
        });
        assert_eq!((s.ttfb_ms.len(), s.gap_ms.len(), s.total_ms.len()), (2, 3, 2));
        assert_eq!((s.errors, s.first_error.as_deref()), (1, Some("cut")));
    }
}
