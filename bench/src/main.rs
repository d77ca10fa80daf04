//! `keyhaven-bench`: measures what Keyhaven adds on top of an upstream.
//!
//! Starts an in-process mock OpenAI-compatible upstream and an in-process Keyhaven engine (temp
//! data dir, recording on, one provider `mock` and one model `bench-model`), then runs the same
//! load twice, directly against the mock and through Keyhaven:
//! - open-loop non-streaming requests at a fixed rate: client-side latency percentiles, their
//!   difference, and the engine's own `x-keyhaven-overhead-ms` header;
//! - streaming requests: time to first SSE line and gaps between text deltas;
//! - the process's resident memory (VmRSS) before and after load;
//! - with `--proxy-handshakes N`, the intercepting proxy (see `proxy.rs`): TLS handshakes per
//!   second and their latency through the proxy with a cached leaf (the first, minting handshake
//!   reported apart), and the latency a proxied request adds over a direct one to the same local
//!   HTTPS upstream. `--proxy-only` runs just that phase.
//! - with `--cursor-turns N`, the Cursor backend (see `cursor.rs`): time from the seq-0
//!   BidiAppend to the first `text_delta` on RunSSE, through the proxy, against the mock's own
//!   time to first token. `--cursor-only` runs just that phase.
//! - with `--external PATH --tab-suggestions N` (or `--tab-only`), Cursor Tab (see `tab.rs`):
//!   Keyhaven's own share of a suggestion against an instant FIM mock, through the proxy.
//! - with `--agent-turns N`, the agent loop (see `agent.rs`): time per tool round of 20-tool-call
//!   turns on the run engine and memory per open conversation. `--agent-only` runs just that.
//!
//! Everything (mock, engine, load generator) shares one process and one tokio runtime, and talks
//! over 127.0.0.1 only. Every phase is bounded; the run ends by itself.
//!
//! ```text
//! cargo run --release -p keyhaven-bench -- --rate 500 --duration 10s --warmup 2s
//! cargo run --release -p keyhaven-bench -- --proxy-only --proxy-handshakes 2000 --proxy-requests 5000
//! cargo run --release -p keyhaven-bench -- --cursor-only --cursor-turns 500 [--upstream-latency 20ms]
//! cargo run --release -p keyhaven-bench -- --agent-only --agent-turns 200
//! ```

mod agent;
mod cursor;
mod external;
mod load;
mod mock;
mod proxy;
mod tab;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use keyhaven::app::Engine;
use keyhaven::config::{EngineConfig, UpstreamOverrides};
use keyhaven::secrets::Secrets;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::load::{Pcts, Samples, StreamSamples, Target};
use crate::mock::Mock;

#[derive(Debug, Parser)]
#[command(about = "Benchmark Keyhaven's overhead against an in-process mock upstream")]
struct Args {
    /// Non-streaming requests per second (open loop).
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// Measured time of the non-streaming phase, e.g. `10s`, `1500ms`, `1m`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Unrecorded warm-up before the measured time, at the same rate.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// Mock upstream latency before every answer.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    upstream_latency: Duration,
    /// Streaming requests per target (0 skips the streaming phase).
    #[arg(long, default_value_t = 200)]
    stream_requests: u32,
    /// Streaming requests in flight at once.
    #[arg(long, default_value_t = 20)]
    stream_concurrency: usize,
    /// Text deltas per streamed answer.
    #[arg(long, default_value_t = 20)]
    chunks: u32,
    /// Delay between streamed text deltas.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    chunk_delay: Duration,
    /// The call ledger's SQLite `synchronous` setting: `normal` (the engine's default; survives a
    /// crash of the process) or `full` (the power-loss option: the start is fsynced before the head).
    #[arg(long, default_value = "normal")]
    synchronous: String,
    /// Per-request client timeout.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// TLS handshakes through the intercepting proxy per measurement (sequential, then
    /// concurrent); 0 skips the proxy phase.
    #[arg(long, default_value_t = 0)]
    proxy_handshakes: u32,
    /// Handshakes in flight at once in the concurrent proxy measurement.
    #[arg(long, default_value_t = 8)]
    proxy_concurrency: usize,
    /// Measured GETs per target on one kept-alive connection, direct vs through the proxy
    /// (after a tenth as many unmeasured ones).
    #[arg(long, default_value_t = 2000)]
    proxy_requests: u32,
    /// Run only the proxy phase (needs `--proxy-handshakes`).
    #[arg(long)]
    proxy_only: bool,
    /// Measured Cursor turns (seq-0 BidiAppend → first text_delta); 0 skips the Cursor phase.
    #[arg(long, default_value_t = 0)]
    cursor_turns: u32,
    /// Run only the Cursor phase (needs `--cursor-turns`).
    #[arg(long)]
    cursor_only: bool,
    /// External mode: measured Cursor Tab suggestions (Keyhaven's share against an instant FIM
    /// mock, see `tab.rs`); 0 skips the Tab cell.
    #[arg(long, default_value_t = 0)]
    tab_suggestions: u32,
    /// External mode: run only the Tab cell (200 suggestions unless `--tab-suggestions`).
    #[arg(long)]
    tab_only: bool,
    /// 20-tool-call agent turns on the run engine per measurement (see `agent.rs`); 0 skips the
    /// agent phase.
    #[arg(long, default_value_t = 0)]
    agent_turns: u32,
    /// Conversations kept open for the agent phase's memory measurement.
    #[arg(long, default_value_t = 500)]
    agent_conversations: u32,
    /// Run only the agent phase (needs `--agent-turns`).
    #[arg(long)]
    agent_only: bool,
    /// Drive this `keyhaven` binary as a separate `keyhaven serve` process instead of an
    /// in-process engine (see `external.rs`): the cells of `--rates` x `--cells`, each direct,
    /// recording on and recording off, in one table.
    #[arg(long, value_name = "PATH_TO_KEYHAVEN")]
    external: Option<std::path::PathBuf>,
    /// External mode: the open-loop rates (requests or streams per second).
    #[arg(long, value_delimiter = ',', default_value = "10,100,500")]
    rates: Vec<u32>,
    /// External mode: the cell kinds to run (chat, anthropic, stream).
    #[arg(long, value_delimiter = ',', default_value = "chat,anthropic,stream", value_parser = external::Kind::parse)]
    cells: Vec<external::Kind>,
    /// External mode: run each cell's targets (direct, recording on, recording off, forwarder)
    /// in turns, this many times, `--duration / N` each (every turn after its `--warmup`), so a
    /// drift of the machine's speed falls on all of them alike.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    slices: u32,
    /// External mode: the CPU list `taskset` pins the gateway to.
    #[arg(long, default_value = "0")]
    gateway_cpu: String,
    /// External mode: the CPU list the bench (mock + load driver) re-executes itself on; empty
    /// leaves it unpinned.
    #[arg(long, default_value = "1")]
    bench_cpu: String,
    /// External mode: streams held open at once for the gateway's RSS reading; 0 skips it.
    #[arg(long, default_value_t = 200)]
    rss_streams: u32,
    /// External mode: `KEY=VALUE` added to the gateways' environment (repeatable), for
    /// experiments such as `TOKIO_WORKER_THREADS=1` or `RUST_LOG=warn`.
    #[arg(long)]
    gateway_env: Vec<String>,
    /// External mode: also run every cell through a null TCP forwarder pinned like
    /// the gateway (the cost of any extra process hop on this machine).
    #[arg(long)]
    forwarder: bool,
    /// Internal: run as the null forwarder to this upstream (see `external.rs`).
    #[arg(long, hide = true)]
    forward: Option<std::net::SocketAddr>,
}

/// `10s`, `250ms`, `2m`, or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a duration like 10s or 500ms"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("`{s}` is not a non-negative duration"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Resident set size and its peak of this process, in KiB (Linux only).
fn rss_kib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn progress(msg: &str) {
    // Progress goes to stderr so stdout holds only the report.
    let _ = writeln!(std::io::stderr(), "keyhaven-bench: {msg}");
}

fn config_text(mock_url: &str, record: bool, synchronous: &str) -> String {
    format!(
        r#"
[server]
record_calls = {record}
synchronous = "{synchronous}"

[[providers]]
name = "mock"
kind = "openai"
base_url = "{mock_url}/v1"

[[models]]
name = "bench-model"
provider = "mock"
upstream = "mock-model"
"#
    )
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(upstream) = args.forward {
        return external::forward_main(upstream);
    }
    if args.external.is_some()
        && let Some(code) = external::pin_self(&args.bench_cpu)?
    {
        std::process::exit(code);
    }
    // Built after pinning: a multi-thread runtime sizes itself from the CPUs this process may use.
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(binary) = args.external.clone() {
        anyhow::ensure!(args.rates.iter().all(|&r| r > 0), "--rates must be positive");
        let opts = external::Options {
            binary,
            rates: args.rates.clone(),
            warmup: args.warmup,
            duration: args.duration,
            slices: args.slices,
            chunks: args.chunks,
            chunk_delay: args.chunk_delay,
            timeout: args.timeout,
            synchronous: args.synchronous.clone(),
            gateway_cpu: args.gateway_cpu.clone(),
            rss_streams: args.rss_streams,
            cursor_turns: args.cursor_turns,
            kinds: args.cells.clone(),
            gateway_env: args.gateway_env.clone(),
            forwarder: args.forwarder,
            tab_suggestions: if args.tab_only && args.tab_suggestions == 0 { 200 } else { args.tab_suggestions },
            tab_only: args.tab_only,
        };
        let report = external::run(opts).await?;
        std::io::stdout().write_all(report.as_bytes()).context("writing the report")?;
        return Ok(());
    }
    anyhow::ensure!(args.rate > 0, "--rate must be positive");
    anyhow::ensure!(!args.proxy_only || args.proxy_handshakes > 0, "--proxy-only needs --proxy-handshakes N");
    anyhow::ensure!(!args.cursor_only || args.cursor_turns > 0, "--cursor-only needs --cursor-turns N");
    anyhow::ensure!(!args.agent_only || args.agent_turns > 0, "--agent-only needs --agent-turns N");
    if args.proxy_only || args.cursor_only || args.agent_only {
        let mut report = String::new();
        if args.proxy_only {
            report.push_str(&proxy_phase(&args).await?);
        }
        if args.cursor_only {
            report.push_str(&cursor_phase(&args).await?);
        }
        if args.agent_only {
            report.push_str(&agent::phase(args.agent_turns, args.agent_conversations, rss_kib).await?);
        }
        std::io::stdout().write_all(report.as_bytes()).context("writing the report")?;
        return Ok(());
    }
    let mem_start = rss_kib();

    // Non-streaming phase: the engine's upstream stream comes without inter-chunk delays.
    let mock = Mock::start(args.upstream_latency, args.chunks, Duration::ZERO).await.context("starting the mock")?;
    let mock_url = format!("http://{}", mock.addr);

    let dir = tempfile::tempdir().context("creating a temp data dir")?;
    let start_engine = |record: bool| {
        let file = keyhaven::config::load_str("bench.toml", &config_text(&mock_url, record, &args.synchronous));
        let database_path = dir.path().join(if record { "keyhaven.db" } else { "unused.db" });
        async move {
            let config = EngineConfig {
                config_path: None,
                ca_dir: database_path.with_extension("ca"),
                database_path,
                file: file?,
                listen: Some(([127, 0, 0, 1], 0).into()),
                proxy_listen: Some(([127, 0, 0, 1], 0).into()),
                upstream_overrides: Default::default(),
            };
            anyhow::Ok(Engine::start(config, Secrets::empty()).await?)
        }
    };
    let engine = start_engine(true).await.context("starting the engine")?;
    let engine_url = format!("http://{}", engine.local_addr());
    let unrecorded = start_engine(false).await.context("starting the engine without recording")?;
    let unrecorded_url = format!("http://{}", unrecorded.local_addr());
    let mem_idle = rss_kib();

    let client = reqwest::Client::builder()
        .http1_only()
        .no_proxy()
        .timeout(args.timeout)
        .pool_max_idle_per_host(1024)
        .build()
        .context("building the HTTP client")?;
    let direct = Target::chat(&mock_url, "mock-model");
    let keyhaven = Target::chat(&engine_url, "bench-model");
    let keyhaven_off = Target::chat(&unrecorded_url, "bench-model");

    progress(&format!(
        "non-streaming, direct: {} req/s for {:?} (+{:?} warm-up)",
        args.rate, args.duration, args.warmup
    ));
    let d = load::open_loop(&client, &direct, args.rate, args.warmup, args.duration).await;
    progress("non-streaming, through Keyhaven with recording off");
    let k_off = load::open_loop(&client, &keyhaven_off, args.rate, args.warmup, args.duration).await;
    progress("non-streaming, through Keyhaven");
    let k = load::open_loop(&client, &keyhaven, args.rate, args.warmup, args.duration).await;
    let mem_after_load = rss_kib();

    let (ds, ks) = if args.stream_requests > 0 {
        mock.set_stream(args.chunks, args.chunk_delay);
        progress(&format!(
            "streaming: {} requests x {} deltas, {:?} apart, concurrency {}",
            args.stream_requests, args.chunks, args.chunk_delay, args.stream_concurrency
        ));
        let ds = load::streaming(&client, &direct, args.stream_requests, args.stream_concurrency, args.chunks).await;
        let ks = load::streaming(&client, &keyhaven, args.stream_requests, args.stream_concurrency, args.chunks).await;
        (Some(ds), Some(ks))
    } else {
        (None, None)
    };
    let mem_after_stream = rss_kib();

    let store = engine.handle().store;
    // Let the recorder catch up before counting.
    store.flush().await.context("flushing the store")?;
    let recorded = store.count_calls().await.context("counting recorded calls")?;
    let dropped = store.dropped();
    drop(store);
    let drained = engine.shutdown(Duration::from_secs(5)).await & unrecorded.shutdown(Duration::from_secs(5)).await;
    mock.stop();

    let mem = [
        ("process start", mem_start),
        ("mock + engine started, idle", mem_idle),
        ("after non-streaming load", mem_after_load),
        ("after streaming load", mem_after_stream),
    ];
    let mut report = render(&args, &d, &k, &k_off, ds.as_ref().zip(ks.as_ref()), &mem, recorded, dropped, drained)?;
    if args.proxy_handshakes > 0 {
        report.push_str(&proxy_phase(&args).await?);
    }
    if args.cursor_turns > 0 {
        report.push_str(&cursor_phase(&args).await?);
    }
    if args.agent_turns > 0 {
        report.push_str(&agent::phase(args.agent_turns, args.agent_conversations, rss_kib).await?);
    }
    std::io::stdout().write_all(report.as_bytes()).context("writing the report")?;
    Ok(())
}

fn row(out: &mut String, label: &str, p: &Pcts) -> std::fmt::Result {
    writeln!(out, "  {label:<26} {:>9.3} {:>9.3} {:>9.3} {:>9.3}   (n={})", p.p50, p.p95, p.p99, p.max, p.n)
}

fn diff(a: &Pcts, b: &Pcts) -> Pcts {
    Pcts { n: a.n.min(b.n), p50: b.p50 - a.p50, p95: b.p95 - a.p95, p99: b.p99 - a.p99, max: b.max - a.max }
}

fn errors(out: &mut String, label: &str, n: u64, first: Option<&String>) -> std::fmt::Result {
    match first {
        Some(e) => writeln!(out, "  {label}: {n} errors, first: {e}"),
        None => writeln!(out, "  {label}: {n} errors"),
    }
}

#[expect(clippy::too_many_arguments, reason = "one flat report of everything measured")]
fn render(
    args: &Args,
    d: &Samples,
    k: &Samples,
    k_off: &Samples,
    streams: Option<(&StreamSamples, &StreamSamples)>,
    mem: &[(&str, Option<(u64, u64)>)],
    recorded: u64,
    dropped: u64,
    drained: bool,
) -> anyhow::Result<String> {
    let mut o = String::new();
    let header = format!("  {:<26} {:>9} {:>9} {:>9} {:>9}", "(ms)", "p50", "p95", "p99", "max");
    writeln!(o, "\nKeyhaven benchmark (in-process mock upstream, 127.0.0.1, http/1.1 client)")?;
    writeln!(
        o,
        "upstream latency {:?}; rate {}/s for {:?} after {:?} warm-up; recording ON (SQLite in a temp dir, synchronous={})\n",
        args.upstream_latency, args.rate, args.duration, args.warmup, args.synchronous
    )?;
    writeln!(o, "Non-streaming latency (scheduled send -> body read, open loop)")?;
    writeln!(
        o,
        "  direct: the mock answers JSON; through Keyhaven: the engine asks the mock for SSE ({} deltas,\n  \
         no delay between them) and accumulates it, so `added` includes that conversion",
        args.chunks
    )?;
    writeln!(o, "{header}")?;
    let (dp, kp) = (Pcts::of(&d.latency_ms), Pcts::of(&k.latency_ms));
    row(&mut o, "direct to mock", &dp)?;
    row(&mut o, "through Keyhaven", &kp)?;
    row(&mut o, "added (difference of pXX)", &diff(&dp, &kp))?;
    row(&mut o, "x-keyhaven-overhead-ms", &Pcts::of(&k.overhead_header_ms))?;
    let off = Pcts::of(&k_off.latency_ms);
    row(&mut o, "through Keyhaven, no record", &off)?;
    row(&mut o, "overhead-ms, no record", &Pcts::of(&k_off.overhead_header_ms))?;
    if off.p99 > 0.0 {
        writeln!(o, "  p99 with recording / without: {:.2}x", kp.p99 / off.p99)?;
    }
    let secs = args.duration.as_secs_f64().max(f64::MIN_POSITIVE);
    writeln!(o, "  achieved: direct {:.0}/s, Keyhaven {:.0}/s", dp.n as f64 / secs, kp.n as f64 / secs)?;
    errors(&mut o, "direct", d.errors, d.first_error.as_ref())?;
    errors(&mut o, "Keyhaven", k.errors, k.first_error.as_ref())?;

    if let Some((ds, ks)) = streams {
        writeln!(
            o,
            "\nStreaming: {} requests per target, concurrency {}, {} deltas {:?} apart",
            args.stream_requests, args.stream_concurrency, args.chunks, args.chunk_delay
        )?;
        writeln!(o, "{header}")?;
        let (dt, kt) = (Pcts::of(&ds.ttfb_ms), Pcts::of(&ks.ttfb_ms));
        row(&mut o, "TTFB direct", &dt)?;
        row(&mut o, "TTFB through Keyhaven", &kt)?;
        row(&mut o, "TTFB added", &diff(&dt, &kt))?;
        row(&mut o, "delta gap direct", &Pcts::of(&ds.gap_ms))?;
        row(&mut o, "delta gap through Keyhaven", &Pcts::of(&ks.gap_ms))?;
        row(&mut o, "total direct", &Pcts::of(&ds.total_ms))?;
        row(&mut o, "total through Keyhaven", &Pcts::of(&ks.total_ms))?;
        errors(&mut o, "direct", ds.errors, ds.first_error.as_ref())?;
        errors(&mut o, "Keyhaven", ks.errors, ks.first_error.as_ref())?;
    }

    writeln!(o, "\nMemory (VmRSS of this whole process: engine + mock + load generator + client)")?;
    for (label, m) in mem {
        match m {
            Some((rss, hwm)) => writeln!(
                o,
                "  {label:<30} {:>8.1} MiB   (peak so far {:.1} MiB)",
                *rss as f64 / 1024.0,
                *hwm as f64 / 1024.0
            )?,
            None => writeln!(o, "  {label:<30} unavailable (no /proc/self/status)")?,
        }
    }
    writeln!(o, "\nRecorder: {recorded} calls in the store, {dropped} records dropped")?;
    if !drained {
        writeln!(o, "Engine shutdown: tasks outlived the 5 s grace period")?;
    }
    writeln!(
        o,
        "\nNotes: mock, engine and load generator share one process and runtime (they compete for CPU);\n\
         `added` rows are differences of percentiles, not percentiles of per-request differences."
    )?;
    Ok(o)
}

/// Starts a local HTTPS upstream and an engine whose proxy dials `api2.cursor.sh` there, then
/// measures handshakes and request latency (see `proxy.rs`); returns the report section.
async fn proxy_phase(args: &Args) -> anyhow::Result<String> {
    let up = proxy::Upstream::start().await.context("starting the HTTPS upstream")?;
    let dir = tempfile::tempdir().context("creating a temp data dir")?;
    // The gateway side is unused here; its provider URL is never dialled.
    let file = keyhaven::config::load_str("bench-proxy.toml", &config_text("http://127.0.0.1:9", false, "full"))?;
    let ca_dir = dir.path().join("ca");
    let config = EngineConfig {
        config_path: None,
        ca_dir: ca_dir.clone(),
        database_path: dir.path().join("proxy.db"),
        file,
        listen: Some(([127, 0, 0, 1], 0).into()),
        proxy_listen: Some(([127, 0, 0, 1], 0).into()),
        upstream_overrides: UpstreamOverrides {
            hosts: HashMap::from([(proxy::HOST.to_owned(), up.addr)]),
            extra_roots_der: vec![up.ca_der.to_vec()],
        },
    };
    let engine = Engine::start(config, Secrets::empty()).await.context("starting the proxy engine")?;
    let proxy_addr = engine.handle().proxy.context("the engine started no proxy")?.addr;
    let ca = CertificateDer::from_pem_file(ca_dir.join(keyhaven::proxy::ca::CERT_FILE))
        .context("reading the engine's local CA certificate")?;
    let via = proxy::connector(ca)?;
    let direct = proxy::connector(up.ca_der.clone())?;
    let (p, d) = (proxy::Route::Proxy(proxy_addr), proxy::Route::Direct(up.addr));
    let (n, c, t) = (args.proxy_handshakes, args.proxy_concurrency.max(1), args.timeout);

    progress("proxy: first handshake (mints the leaf)");
    let first = proxy::handshakes(p, &via, 1, 1, t).await;
    progress(&format!("proxy: {n} handshakes sequential, then {c} at a time; the same direct"));
    let p_seq = proxy::handshakes(p, &via, n, 1, t).await;
    let p_conc = proxy::handshakes(p, &via, n, c, t).await;
    let d_seq = proxy::handshakes(d, &direct, n, 1, t).await;
    let d_conc = proxy::handshakes(d, &direct, n, c, t).await;
    let m = args.proxy_requests;
    let warm = (m / 10).max(1);
    progress(&format!("proxy: {m} kept-alive GETs direct, then through the proxy"));
    let r_direct = proxy::requests(d, &direct, m, warm, t).await;
    let r_proxy = proxy::requests(p, &via, m, warm, t).await;

    let drained = engine.shutdown(Duration::from_secs(5)).await;
    up.stop();

    let mut o = String::new();
    let header = format!("  {:<26} {:>9} {:>9} {:>9} {:>9}", "(ms)", "p50", "p95", "p99", "max");
    writeln!(o, "\nIntercepting proxy (local HTTPS upstream for {}, 127.0.0.1, rustls client)", proxy::HOST)?;
    writeln!(
        o,
        "Handshakes: fresh TCP + `CONNECT {}:443` + full TLS handshake (no resumption) trusting the\n  \
         engine's local CA; `direct` = fresh TCP + full TLS handshake to the upstream itself",
        proxy::HOST
    )?;
    writeln!(o, "{header}")?;
    row(&mut o, "first via proxy (minting)", &Pcts::of(&first.setup_ms))?;
    row(&mut o, "via proxy, sequential", &Pcts::of(&p_seq.setup_ms))?;
    row(&mut o, "  of which TLS", &Pcts::of(&p_seq.tls_ms))?;
    row(&mut o, &format!("via proxy, {c} concurrent"), &Pcts::of(&p_conc.setup_ms))?;
    row(&mut o, "direct, sequential", &Pcts::of(&d_seq.setup_ms))?;
    row(&mut o, &format!("direct, {c} concurrent"), &Pcts::of(&d_conc.setup_ms))?;
    writeln!(
        o,
        "  handshakes/s: via proxy {:.0} sequential, {:.0} with {c} concurrent; direct {:.0} / {:.0}",
        p_seq.per_second(),
        p_conc.per_second(),
        d_seq.per_second(),
        d_conc.per_second()
    )?;
    for (label, h) in [("first", &first), ("proxy seq", &p_seq), ("proxy conc", &p_conc), ("direct seq", &d_seq)] {
        errors(&mut o, label, h.errors, h.first_error.as_ref())?;
    }
    errors(&mut o, "direct conc", d_conc.errors, d_conc.first_error.as_ref())?;
    writeln!(
        o,
        "\nKept-alive GET {} (one HTTP/1.1 connection per target, {m} measured after {warm} unmeasured;\n  \
         through the proxy: client -> proxy TLS -> engine forwards over its pooled upstream connection)",
        proxy::PATH
    )?;
    writeln!(o, "{header}")?;
    let (dp, pp) = (Pcts::of(&r_direct.latency_ms), Pcts::of(&r_proxy.latency_ms));
    row(&mut o, "direct to upstream", &dp)?;
    row(&mut o, "through the proxy", &pp)?;
    row(&mut o, "added (difference of pXX)", &diff(&dp, &pp))?;
    errors(&mut o, "direct", r_direct.errors, r_direct.first_error.as_ref())?;
    errors(&mut o, "proxy", r_proxy.errors, r_proxy.first_error.as_ref())?;
    if !drained {
        writeln!(o, "Proxy engine shutdown: tasks outlived the 5 s grace period")?;
    }
    Ok(o)
}

/// Starts the mock (one text delta per answer, `--upstream-latency` before it) and two engines in
/// `local` routing mode (recording on, then off), then measures Cursor turns through each proxy
/// (see `cursor.rs`); returns the report section.
async fn cursor_phase(args: &Args) -> anyhow::Result<String> {
    let mock = Mock::start(args.upstream_latency, 1, Duration::ZERO).await.context("starting the mock")?;
    let mock_url = format!("http://{}", mock.addr);
    let dir = tempfile::tempdir().context("creating a temp data dir")?;
    let client = reqwest::Client::builder().http1_only().no_proxy().timeout(args.timeout).build()?;
    let direct = Target::chat(&mock_url, "mock-model");
    let n = args.cursor_turns;
    let warm = (n / 10).max(1);
    let mut results = Vec::new();
    for record in [true, false] {
        let name = if record { "cursor" } else { "cursor-unrecorded" };
        let text = config_text(&mock_url, record, &args.synchronous) + "\n[proxy]\nmode = \"local\"\n";
        let ca_dir = dir.path().join(format!("{name}.ca"));
        let config = EngineConfig {
            config_path: None,
            ca_dir: ca_dir.clone(),
            database_path: dir.path().join(format!("{name}.db")),
            file: keyhaven::config::load_str("bench-cursor.toml", &text)?,
            listen: Some(([127, 0, 0, 1], 0).into()),
            proxy_listen: Some(([127, 0, 0, 1], 0).into()),
            upstream_overrides: Default::default(),
        };
        let engine = Engine::start(config, Secrets::empty()).await.context("starting the Cursor engine")?;
        let proxy_addr = engine.handle().proxy.context("the engine started no proxy")?.addr;
        let ca = CertificateDer::from_pem_file(ca_dir.join(keyhaven::proxy::ca::CERT_FILE))
            .context("reading the engine's local CA certificate")?;
        let tls = proxy::connector(ca)?;
        progress(&format!("cursor: {n} turns (+{warm} unmeasured), recording {}", if record { "on" } else { "off" }));
        let turns = cursor::turns(proxy_addr, &tls, &client, &direct, n, warm, args.timeout).await;
        let drained = engine.shutdown(Duration::from_secs(5)).await;
        results.push((record, turns, drained));
    }
    mock.stop();

    let mut o = String::new();
    let header = format!("  {:<26} {:>9} {:>9} {:>9} {:>9}", "(ms)", "p50", "p95", "p99", "max");
    writeln!(o, "\nCursor turns (local mode, RunSSE + hex BidiAppend over HTTP/1.1 through the proxy)")?;
    writeln!(
        o,
        "  span: seq-0 BidiAppend sent -> first text_delta frame read (connections already open);\n  \
         mock TTFT: the same mock asked directly, request sent -> first SSE data line; upstream latency {:?}",
        args.upstream_latency
    )?;
    for (record, t, drained) in &results {
        writeln!(
            o,
            "recording {}:",
            if *record { "on (synchronous=".to_owned() + &args.synchronous + ")" } else { "off".to_owned() }
        )?;
        writeln!(o, "{header}")?;
        let (via, mock_ttft) = (Pcts::of(&t.first_delta_ms), Pcts::of(&t.mock_ttft_ms));
        row(&mut o, "mock TTFT (direct)", &mock_ttft)?;
        row(&mut o, "append -> first text_delta", &via)?;
        row(&mut o, "added (difference of pXX)", &diff(&mock_ttft, &via))?;
        errors(&mut o, "turns", t.errors, t.first_error.as_ref())?;
        if !drained {
            writeln!(o, "  engine shutdown: tasks outlived the 5 s grace period")?;
        }
    }
    Ok(o)
}
