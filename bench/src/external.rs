//! `--external PATH`: Keyhaven as a client sees it, a separate `keyhaven serve` process.
//!
//! The in-process modes share one runtime between engine, mock and load generator, so they
//! measure the engine's own work but not what a client pays (its own process, sockets, runtime
//! threads, the upstream connection pool). This mode starts the release binary twice as separate
//! processes (recording on, and `record_calls = false`), each with a throwaway data dir, config
//! file and HOME, pinned to CPU 0 with `taskset -c 0`; the bench itself (mock upstream and
//! open-loop load driver) re-executes itself pinned to CPU 1 (see [`pin_self`]). Every cell runs
//! three times in a row at the same rate: directly against the mock (the baseline), through the
//! gateway with recording on, through the gateway with recording off. Overhead is the gateway's
//! percentile minus the direct percentile of the same cell.
//!
//! Cells: OpenAI Chat in, Anthropic Messages in (translated by the gateway to the Chat mock),
//! streaming Chat (time to first byte and inter-chunk gaps, `chunks` deltas `chunk_delay` apart),
//! each at every `--rates` value, open loop. The gateway's CPU is `utime + stime` from
//! `/proc/PID/stat` over the cell (warm-up included) as a percentage of one core; its memory is
//! VmRSS idle and with `--rss-streams` streams open at once. Optionally (`--cursor-turns N`) the
//! Cursor turn through the external gateway's proxy, and (`--tab-suggestions N`) the Cursor Tab
//! cell (see `tab.rs`): Keyhaven's own share of a suggestion against an instant FIM mock;
//! `--tab-only` runs just that cell. One markdown table is printed.

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::load::{self, Pcts, Samples, StreamSamples, Target};
use crate::mock::Mock;
use crate::{cursor, progress, proxy, tab};

/// Set in the environment of the re-executed, pinned bench so it does not pin again.
const PINNED_ENV: &str = "KEYHAVEN_BENCH_PINNED";

/// What the external mode needs from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub binary: PathBuf,
    pub rates: Vec<u32>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Each cell's duration in this many turns per target (direct, on, off, forwarder); at least 1.
    pub slices: u32,
    pub chunks: u32,
    pub chunk_delay: Duration,
    pub timeout: Duration,
    pub synchronous: String,
    pub gateway_cpu: String,
    pub rss_streams: u32,
    pub cursor_turns: u32,
    pub kinds: Vec<Kind>,
    /// `KEY=VALUE` pairs added to the gateways' environment (experiments: `TOKIO_WORKER_THREADS`,
    /// `GLIBC_TUNABLES`, `RUST_LOG`).
    pub gateway_env: Vec<String>,
    /// Also run every cell through a null TCP forwarder pinned like the gateway, with its CPU.
    pub forwarder: bool,
    /// Measured Cursor Tab suggestions (0: no Tab cell).
    pub tab_suggestions: u32,
    /// Run only the Tab cell.
    pub tab_only: bool,
}

/// A cell's request shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// OpenAI Chat in, non-streaming.
    Chat,
    /// Anthropic Messages in, non-streaming, translated to the Chat mock.
    Anthropic,
    /// OpenAI Chat in, streaming.
    Stream,
}

impl Kind {
    pub fn parse(s: &str) -> Result<Kind, String> {
        match s {
            "chat" => Ok(Kind::Chat),
            "anthropic" => Ok(Kind::Anthropic),
            "stream" => Ok(Kind::Stream),
            _ => Err(format!("`{s}` is not a cell kind (chat, anthropic, stream)")),
        }
    }
}

/// Re-executes this bench under `taskset -c CPU` unless it already runs there; returns the
/// child's exit code when it did (the caller exits with it), `None` to go on in this process.
pub fn pin_self(cpu: &str) -> anyhow::Result<Option<i32>> {
    if std::env::var_os(PINNED_ENV).is_some() || cpu.is_empty() {
        return Ok(None);
    }
    let exe = std::env::current_exe().context("finding the bench's own executable")?;
    let status = Command::new("taskset")
        .arg("-c")
        .arg(cpu)
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(PINNED_ENV, cpu)
        .status()
        .context("running taskset (util-linux) to pin the bench")?;
    Ok(Some(status.code().unwrap_or(1)))
}

/// A `keyhaven serve` child process.
struct Gateway {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    proxy: Option<SocketAddr>,
    ca_cert: PathBuf,
    _dir: tempfile::TempDir,
}

fn gateway_config(mock_url: &str, record: bool, synchronous: &str, proxy: bool, extra: &str) -> String {
    let proxy = if proxy {
        "[proxy]\nenabled = true\nlisten = \"127.0.0.1:0\"\nmode = \"local\"\n"
    } else {
        "[proxy]\nenabled = false\n"
    };
    format!(
        r#"[server]
listen = "127.0.0.1:0"
record_calls = {record}
synchronous = "{synchronous}"

{proxy}
[[providers]]
name = "mock"
kind = "openai"
base_url = "{mock_url}/v1"

[[models]]
name = "bench-model"
provider = "mock"
upstream = "mock-model"
{extra}"#
    )
}

/// `http://127.0.0.1:PORT` after `prefix` in a banner line.
fn addr_after(line: &str, prefix: &str) -> Option<SocketAddr> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':')).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl Gateway {
    fn start(opts: &Options, mock_url: &str, record: bool, proxy: bool) -> anyhow::Result<Gateway> {
        Gateway::start_with(opts, mock_url, record, proxy, "")
    }

    /// As [`Gateway::start`], with `extra` appended to the config file.
    fn start_with(opts: &Options, mock_url: &str, record: bool, proxy: bool, extra: &str) -> anyhow::Result<Gateway> {
        let dir = tempfile::tempdir().context("creating the gateway's temp dir")?;
        let config = dir.path().join("config.toml");
        let data = dir.path().join("data");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home)?;
        std::fs::write(&config, gateway_config(mock_url, record, &opts.synchronous, proxy, extra))?;
        let log = std::fs::File::create(dir.path().join("serve.log"))?;
        let mut child = Command::new("taskset")
            .arg("-c")
            .arg(&opts.gateway_cpu)
            .arg(&opts.binary)
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .arg("serve")
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            // No session bus: the CA key goes to its file fallback, never the real keyring.
            .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent")
            .envs(opts.gateway_env.iter().filter_map(|kv| kv.split_once('=')))
            .env_remove("KEYHAVEN_CONFIG")
            .env_remove("KEYHAVEN_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting taskset -c {} {}", opts.gateway_cpu, opts.binary.display()))?;
        // taskset execs the binary: the child's pid is the gateway's.
        let pid = child.id();
        let stdout = child.stdout.take().context("the gateway's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut addr = None;
        let mut proxy_addr = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        for line in lines.by_ref() {
            let line = line.context("reading the gateway's banner")?;
            if addr.is_none() {
                addr = addr_after(&line, "listening on http://");
            }
            if line.contains("HTTPS proxy") {
                proxy_addr = addr_after(&line, "HTTPS proxy http://");
            }
            if line.trim_start().starts_with("Control:") || Instant::now() > deadline {
                break;
            }
        }
        // Keep draining stdout so the gateway never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let Some(addr) = addr else {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
            anyhow::bail!("the gateway printed no listen address; its log:\n{log}");
        };
        anyhow::ensure!(!proxy || proxy_addr.is_some(), "the gateway started no proxy");
        let ca_cert = data.join("ca").join(keyhaven::proxy::ca::CERT_FILE);
        Ok(Gateway { child, pid, addr, proxy: proxy_addr, ca_cert, _dir: dir })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|r| r.split_whitespace().next())?.parse().ok()
    }

    fn stop(mut self) {
        // SIGTERM for a clean drain, SIGKILL if it takes too long.
        let _ = Command::new("kill").arg("-TERM").arg(self.pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The null forwarder: this bench re-executed with `--forward UPSTREAM`, pinned like the
/// gateway. It copies bytes both ways between each accepted connection and a new connection to
/// the mock and does nothing else, so its overhead is what any extra process hop on the pinned
/// core costs (cross-core wake-ups, loopback TCP, one more connection per request in flight):
/// the floor under the gateway's overhead on this machine.
struct Forwarder {
    child: Child,
    addr: SocketAddr,
}

impl Forwarder {
    fn start(cpu: &str, upstream: SocketAddr) -> anyhow::Result<Forwarder> {
        let exe = std::env::current_exe().context("finding the bench's own executable")?;
        let mut child = Command::new("taskset")
            .arg("-c")
            .arg(cpu)
            .arg(exe)
            .arg("--forward")
            .arg(upstream.to_string())
            .env(PINNED_ENV, cpu)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the null forwarder")?;
        let stdout = child.stdout.take().context("the forwarder's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line.trim().parse().with_context(|| format!("the forwarder printed `{}`", line.trim()))?;
        Ok(Forwarder { child, addr })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--forward UPSTREAM`: listens on 127.0.0.1:0, prints the address, forwards every connection.
pub fn forward_main(upstream: SocketAddr) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let mut out = std::io::stdout();
        std::io::Write::write_all(&mut out, format!("{}\n", listener.local_addr()?).as_bytes())?;
        std::io::Write::flush(&mut out)?;
        loop {
            let (mut inbound, _) = listener.accept().await?;
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else { return };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    })
}

/// A process's utime + stime, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    stat_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime from a `/proc/PID/stat` line (proc(5): `pid (comm) state ppid …`, utime is
/// field 14 and stime field 15, counting from 1; `comm` may hold spaces and parentheses).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so fields 14 and 15 are its 12th and 13th.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if unknown).
fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// One measured run of a cell against one target.
#[derive(Debug)]
struct Run {
    /// Latency (non-streaming) or time to first byte (streaming).
    main: Pcts,
    /// Inter-chunk gaps (streaming only).
    gap: Option<Pcts>,
    /// The engine's own `x-keyhaven-overhead-ms` (non-streaming only).
    header: Option<Pcts>,
    errors: u64,
    first_error: Option<String>,
    /// The gateway's CPU over the run, % of one core.
    cpu: Option<f64>,
}

impl Run {
    fn of_samples(s: &Samples, cpu: Option<f64>) -> Run {
        let header = (!s.overhead_header_ms.is_empty()).then(|| Pcts::of(&s.overhead_header_ms));
        Run {
            main: Pcts::of(&s.latency_ms),
            gap: None,
            header,
            errors: s.errors,
            first_error: s.first_error.clone(),
            cpu,
        }
    }

    fn of_streams(s: &StreamSamples, cpu: Option<f64>) -> Run {
        Run {
            main: Pcts::of(&s.ttfb_ms),
            gap: Some(Pcts::of(&s.gap_ms)),
            header: None,
            errors: s.errors,
            first_error: s.first_error.clone(),
            cpu,
        }
    }
}

/// A cell: direct baseline, gateway with recording on, with recording off.
#[derive(Debug)]
struct Cell {
    kind: Kind,
    rate: u32,
    direct: Run,
    on: Run,
    off: Run,
    /// Through the null forwarder (with `--forwarder`).
    forwarded: Option<Run>,
}

/// One target's samples over a cell's slices, and the CPU its process used over them.
#[derive(Default)]
struct Acc {
    chat: load::Samples,
    stream: load::StreamSamples,
    ticks: Option<u64>,
    wall_s: f64,
}

impl Acc {
    /// One slice of `duration` (after the warm-up) against `target`, added to what came before.
    async fn slice(
        &mut self,
        client: &reqwest::Client,
        opts: &Options,
        (kind, rate, duration): (Kind, u32, Duration),
        target: &Target,
        measured_pid: Option<u32>,
    ) {
        let before = measured_pid.and_then(cpu_ticks);
        let t0 = Instant::now();
        if kind == Kind::Stream {
            let s = load::open_loop_streaming(client, target, rate, opts.warmup, duration, opts.chunks).await;
            self.stream.merge(s);
        } else {
            self.chat.merge(load::open_loop(client, target, rate, opts.warmup, duration).await);
        }
        self.wall_s += t0.elapsed().as_secs_f64();
        if let Some((b, a)) = before.zip(measured_pid.and_then(cpu_ticks)) {
            *self.ticks.get_or_insert(0) += a.saturating_sub(b);
        }
    }

    fn run(&self, kind: Kind, tck: f64) -> Run {
        let cpu = self.ticks.map(|t| t as f64 / tck / self.wall_s.max(1e-9) * 100.0);
        if kind == Kind::Stream { Run::of_streams(&self.stream, cpu) } else { Run::of_samples(&self.chat, cpu) }
    }
}

/// Runs the external benchmark and returns the report.
pub async fn run(opts: Options) -> anyhow::Result<String> {
    anyhow::ensure!(
        opts.binary.is_file(),
        "{} is not a file (build it: cargo build --release --bin keyhaven)",
        opts.binary.display()
    );
    let tck = clk_tck();
    let mock = Mock::start(Duration::ZERO, opts.chunks, Duration::ZERO).await.context("starting the mock")?;
    let mock_url = format!("http://{}", mock.addr);
    if opts.tab_only {
        let t = tab_cell(&opts, &mock_url).await.map_err(|e| format!("{e:#}"));
        mock.stop();
        let mut o = String::new();
        render_tab(&mut o, &opts, Some(t))?;
        return Ok(o);
    }
    progress(&format!(
        "starting {} twice (recording on, off), pinned to CPU {}",
        opts.binary.display(),
        opts.gateway_cpu
    ));
    let on = Gateway::start(&opts, &mock_url, true, false).context("starting the gateway (recording on)")?;
    let off = Gateway::start(&opts, &mock_url, false, false).context("starting the gateway (recording off)")?;
    // Let start-up work (migrations, first checkpoint) settle before the idle reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_idle = (on.rss_kib(), off.rss_kib());
    let forwarder = if opts.forwarder { Some(Forwarder::start(&opts.gateway_cpu, mock.addr)?) } else { None };

    let client = reqwest::Client::builder()
        .http1_only()
        .no_proxy()
        .timeout(opts.timeout)
        .pool_max_idle_per_host(1024)
        .build()
        .context("building the HTTP client")?;

    let mut cells = Vec::new();
    for &kind in &opts.kinds {
        for &rate in &opts.rates {
            let (direct, via_on, via_off) = match kind {
                Kind::Chat | Kind::Stream => (
                    Target::chat(&mock_url, "mock-model"),
                    Target::chat(&on.url(), "bench-model"),
                    Target::chat(&off.url(), "bench-model"),
                ),
                Kind::Anthropic => (
                    Target::chat(&mock_url, "mock-model"),
                    Target::anthropic(&on.url(), "bench-model"),
                    Target::anthropic(&off.url(), "bench-model"),
                ),
            };
            if kind == Kind::Stream {
                mock.set_stream(opts.chunks, opts.chunk_delay);
            } else {
                mock.set_stream(opts.chunks, Duration::ZERO);
            }
            progress(&format!(
                "{kind:?} at {rate}/s: direct, recording on, recording off ({:?} each in {} turn(s), {:?} warm-up per turn)",
                opts.duration, opts.slices, opts.warmup
            ));
            // The targets take turns, `--slices` times: a drift of the machine's speed during the
            // cell then falls on recording on and off alike. Every other slice runs off before on.
            let each = opts.duration / opts.slices;
            let forwarded =
                forwarder.as_ref().map(|fw| (Target::chat(&format!("http://{}", fw.addr), "mock-model"), fw.pid()));
            let (mut d, mut a, mut b, mut f) = (Acc::default(), Acc::default(), Acc::default(), Acc::default());
            for i in 0..opts.slices {
                let cell = (kind, rate, each);
                d.slice(&client, &opts, cell, &direct, None).await;
                if i % 2 == 0 {
                    a.slice(&client, &opts, cell, &via_on, Some(on.pid)).await;
                    b.slice(&client, &opts, cell, &via_off, Some(off.pid)).await;
                } else {
                    b.slice(&client, &opts, cell, &via_off, Some(off.pid)).await;
                    a.slice(&client, &opts, cell, &via_on, Some(on.pid)).await;
                }
                // The same traffic (the mock's own dialect) through a process that only copies
                // bytes: its CPU is what the machine charges for moving these bytes at all.
                if let Some((t, pid)) = &forwarded {
                    f.slice(&client, &opts, cell, t, Some(*pid)).await;
                }
            }
            let (d, a, b) = (d.run(kind, tck), a.run(kind, tck), b.run(kind, tck));
            let f = forwarded.is_some().then(|| f.run(kind, tck));
            cells.push(Cell { kind, rate, direct: d, on: a, off: b, forwarded: f });
        }
    }

    // Memory with many streams open at once, on each gateway: slow streams so they overlap, RSS
    // read while all are open.
    let mut rss_streams = Vec::new();
    if opts.rss_streams > 0 {
        for (label, g) in [("on", &on), ("off", &off)] {
            progress(&format!("memory: {} concurrent streams, recording {label}", opts.rss_streams));
            let per_chunk = Duration::from_millis(100);
            mock.set_stream(opts.chunks, per_chunk);
            let target = Target::chat(&g.url(), "bench-model");
            let n = opts.rss_streams;
            let chunks = opts.chunks;
            let c = client.clone();
            let load = tokio::spawn(async move { load::streaming(&c, &target, n, n as usize, chunks).await });
            // Half-way through the streams' lifetime every one is open.
            tokio::time::sleep(per_chunk * opts.chunks / 2).await;
            let rss = g.rss_kib();
            let s = load.await.context("the memory phase's load task")?;
            // And once they are all closed again.
            tokio::time::sleep(Duration::from_millis(500)).await;
            rss_streams.push((label, rss, g.rss_kib(), s.errors, s.first_error));
        }
    }

    // A failing Cursor cell must not lose the table measured above.
    let cursor = if opts.cursor_turns > 0 {
        Some(cursor_cell(&opts, &mock, &mock_url, &client).await.map_err(|e| format!("{e:#}")))
    } else {
        None
    };

    let tab = if opts.tab_suggestions > 0 {
        Some(tab_cell(&opts, &mock_url).await.map_err(|e| format!("{e:#}")))
    } else {
        None
    };

    on.stop();
    off.stop();
    if let Some(f) = forwarder {
        f.stop();
    }
    mock.stop();
    let mut report = render(&opts, &cells, rss_idle, rss_streams, cursor)?;
    render_tab(&mut report, &opts, tab)?;
    Ok(report)
}

/// Cursor Tab suggestions through an external gateway's proxy against an instant FIM mock,
/// recording on then off.
async fn tab_cell(opts: &Options, mock_url: &str) -> anyhow::Result<Vec<(bool, tab::Suggestions)>> {
    let fim = tab::FimMock::start().await.context("starting the FIM mock")?;
    let extra = tab::config(&format!("http://{}", fim.addr));
    let n = opts.tab_suggestions;
    let warm = (n / 10).max(1);
    let mut out = Vec::new();
    for record in [true, false] {
        let g = Gateway::start_with(opts, mock_url, record, true, &extra).context("starting the Tab gateway")?;
        let proxy_addr = g.proxy.context("no proxy address")?;
        let ca = CertificateDer::from_pem_file(&g.ca_cert).context("reading the gateway's local CA certificate")?;
        let tls = proxy::connector(ca)?;
        progress(&format!(
            "tab: {n} suggestions (+{warm} unmeasured), recording {}",
            if record { "on" } else { "off" }
        ));
        let s = tab::suggestions(proxy_addr, &tls, &fim, n, warm, opts.timeout).await;
        g.stop();
        out.push((record, s));
    }
    fim.stop();
    Ok(out)
}

/// The Tab table (nothing when the cell did not run).
fn render_tab(
    o: &mut String,
    opts: &Options,
    tab: Option<Result<Vec<(bool, tab::Suggestions)>, String>>,
) -> anyhow::Result<()> {
    match tab {
        None => {}
        Some(Err(e)) => writeln!(o, "\nCursor Tab cell failed: {e}")?,
        Some(Ok(runs)) => {
            writeln!(
                o,
                "\nCursor Tab (external gateway's proxy, local mode, instant FIM mock, {} suggestions, ms): Keyhaven's share = \
                 (StreamCpp sent -> FIM request read) + (FIM answer written -> last frame read); target p99 <= 2 ms",
                opts.tab_suggestions
            )?;
            writeln!(o, "| recording | share p50 / p99 | suggestion p50 / p99 | errors |")?;
            writeln!(o, "|---|---|---|---|")?;
            for (record, s) in runs {
                writeln!(
                    o,
                    "| {} | {} | {} | {} |",
                    if record { "on" } else { "off" },
                    pair(&Pcts::of(&s.share_ms)),
                    pair(&Pcts::of(&s.total_ms)),
                    s.errors
                )?;
                if let Some(e) = &s.first_error {
                    writeln!(o, "  first error: {e}")?;
                }
            }
        }
    }
    Ok(())
}

/// Cursor turns through an external gateway's proxy (local mode), recording on then off.
async fn cursor_cell(
    opts: &Options,
    mock: &Mock,
    mock_url: &str,
    client: &reqwest::Client,
) -> anyhow::Result<Vec<(bool, cursor::Turns)>> {
    // `cursor::turns` asks the mock for a one-delta stream to time its TTFT.
    mock.set_stream(1, Duration::ZERO);
    let direct = Target::chat(mock_url, "mock-model");
    let n = opts.cursor_turns;
    let warm = (n / 10).max(1);
    let mut out = Vec::new();
    for record in [true, false] {
        let g = Gateway::start(opts, mock_url, record, true).context("starting the Cursor gateway")?;
        let proxy_addr = g.proxy.context("no proxy address")?;
        let ca = CertificateDer::from_pem_file(&g.ca_cert).context("reading the gateway's local CA certificate")?;
        let tls = proxy::connector(ca)?;
        progress(&format!("cursor: {n} turns (+{warm} unmeasured), recording {}", if record { "on" } else { "off" }));
        let turns = cursor::turns(proxy_addr, &tls, client, &direct, n, warm, opts.timeout).await;
        g.stop();
        out.push((record, turns));
    }
    Ok(out)
}

fn pair(p: &Pcts) -> String {
    format!("{:.2} / {:.2}", p.p50, p.p99)
}

fn over(d: &Pcts, g: &Pcts) -> String {
    format!("{:+.2} / {:+.2}", g.p50 - d.p50, g.p99 - d.p99)
}

fn cpu(r: &Run) -> String {
    r.cpu.map_or_else(|| "—".to_owned(), |c| format!("{c:.1}"))
}

fn kib_mib(k: Option<u64>) -> String {
    k.map_or_else(|| "unavailable".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

/// One gateway's RSS with many streams open: (recording label, while open, after, errors, first error).
type StreamsRss = (&'static str, Option<u64>, Option<u64>, u64, Option<String>);

fn render(
    opts: &Options,
    cells: &[Cell],
    rss_idle: (Option<u64>, Option<u64>),
    rss_streams: Vec<StreamsRss>,
    cursor: Option<Result<Vec<(bool, cursor::Turns)>, String>>,
) -> anyhow::Result<String> {
    let mut o = String::new();
    writeln!(
        o,
        "\nKeyhaven external benchmark: `keyhaven serve` pinned to CPU {}, mock + open-loop driver pinned to CPU {}",
        opts.gateway_cpu,
        std::env::var(PINNED_ENV).unwrap_or_else(|_| "(not pinned)".to_owned())
    )?;
    writeln!(
        o,
        "{:?} measured per target in {} interleaved slice(s), each after {:?} warm-up; instant mock; streams: {} deltas {:?} apart; synchronous = \"{}\"; ms\n",
        opts.duration, opts.slices, opts.warmup, opts.chunks, opts.chunk_delay, opts.synchronous
    )?;
    writeln!(
        o,
        "| cell | rate/s | recording | direct p50 / p99 | gateway p50 / p99 | overhead p50 / p99 | on/off p99 | gateway CPU % | errors |"
    )?;
    writeln!(o, "|---|---|---|---|---|---|---|---|---|")?;
    for c in cells {
        let name = match c.kind {
            Kind::Chat => "OpenAI Chat in",
            Kind::Anthropic => "Anthropic in (translated)",
            Kind::Stream => "streaming, TTFB",
        };
        let ratio =
            if c.off.main.p99 > 0.0 { format!("{:.2}", c.on.main.p99 / c.off.main.p99) } else { "—".to_owned() };
        for (label, r, ratio) in [("on", &c.on, ratio.as_str()), ("off", &c.off, "")] {
            writeln!(
                o,
                "| {name} | {} | {label} | {} | {} | {} | {ratio} | {} | {} |",
                c.rate,
                pair(&c.direct.main),
                pair(&r.main),
                over(&c.direct.main, &r.main),
                cpu(r),
                r.errors + c.direct.errors,
            )?;
        }
        if let Some(f) = &c.forwarded {
            writeln!(
                o,
                "| {name}: null TCP forwarder | {} | — | {} | {} | {} | | {} | {} |",
                c.rate,
                pair(&c.direct.main),
                pair(&f.main),
                over(&c.direct.main, &f.main),
                cpu(f),
                f.errors,
            )?;
        }
        if let (Some(dg), Some(on_g), Some(off_g)) = (&c.direct.gap, &c.on.gap, &c.off.gap) {
            let ratio = if off_g.p99 > 0.0 { format!("{:.2}", on_g.p99 / off_g.p99) } else { "—".to_owned() };
            for (label, g, ratio) in [("on", on_g, ratio.as_str()), ("off", off_g, "")] {
                writeln!(
                    o,
                    "| streaming, chunk gap | {} | {label} | {} | {} | {} | {ratio} | | |",
                    c.rate,
                    pair(dg),
                    pair(g),
                    over(dg, g)
                )?;
            }
            if let Some(fg) = c.forwarded.as_ref().and_then(|f| f.gap.as_ref()) {
                writeln!(
                    o,
                    "| streaming, chunk gap: null TCP forwarder | {} | — | {} | {} | {} | | | |",
                    c.rate,
                    pair(dg),
                    pair(fg),
                    over(dg, fg)
                )?;
            }
        }
    }
    writeln!(o)?;
    writeln!(o, "Gateway RSS: idle {} (recording on), {} (recording off)", kib_mib(rss_idle.0), kib_mib(rss_idle.1))?;
    for (label, rss, after, errors, first) in rss_streams {
        writeln!(
            o,
            "Gateway RSS with {} streams open at once (recording {label}): {}; after they closed: {}",
            opts.rss_streams,
            kib_mib(rss),
            kib_mib(after)
        )?;
        if errors > 0 {
            writeln!(o, "  {errors} of those streams failed, first: {}", first.unwrap_or_default())?;
        }
    }
    // The engine's own view, for comparison with what the client sees.
    let mut header_line = String::new();
    for c in cells {
        if let (Some(h_on), Some(h_off)) = (&c.on.header, &c.off.header) {
            let _ = write!(header_line, " {:?}@{}: {:.2}/{:.2}", c.kind, c.rate, h_on.p99, h_off.p99);
        }
    }
    if !header_line.is_empty() {
        writeln!(o, "Engine's own x-keyhaven-overhead-ms p99 (on/off):{header_line}")?;
    }
    for c in cells {
        for (label, r) in [("direct", &c.direct), ("on", &c.on), ("off", &c.off)]
            .into_iter()
            .chain(c.forwarded.as_ref().map(|f| ("forwarder", f)))
        {
            if let Some(e) = &r.first_error {
                writeln!(o, "{:?}@{} {label}: {} errors, first: {e}", c.kind, c.rate, r.errors)?;
            }
        }
    }
    if let Some(Err(e)) = &cursor {
        writeln!(o, "\nCursor cell failed: {e}")?;
    }
    if let Some(Ok(turns)) = cursor {
        writeln!(
            o,
            "\nCursor (external gateway's proxy, local mode): seq-0 BidiAppend -> first text_delta, vs the mock's TTFT"
        )?;
        writeln!(o, "| recording | turn p50 / p99 | mock TTFT p50 / p99 | beyond TTFT p50 / p99 | errors |")?;
        writeln!(o, "|---|---|---|---|---|")?;
        for (record, t) in turns {
            let (f, m) = (Pcts::of(&t.first_delta_ms), Pcts::of(&t.mock_ttft_ms));
            writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                if record { "on" } else { "off" },
                pair(&f),
                pair(&m),
                over(&m, &f),
                t.errors
            )?;
            if let Some(e) = &t.first_error {
                writeln!(o, "  first error: {e}")?;
            }
        }
    }
    writeln!(
        o,
        "\nOverhead = gateway percentile minus the direct percentile of the same cell (not per-request differences).\n\
         CPU: the gateway's (or the forwarder's) utime+stime over the run (warm-up included) as % of one core; \
         the forwarder's is what moving the same bytes through any process costs on this machine."
    )?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::stat_cpu_ticks;

    #[test]
    fn cpu_ticks_are_fields_14_and_15_of_proc_stat_whatever_the_command_name() {
        // A line shaped as proc(5) describes it: utime 1234, stime 56.
        let line = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 9 0 77 0 0";
        assert_eq!(stat_cpu_ticks(line), Some(1290));
        assert_eq!(stat_cpu_ticks("4242 (x) S 1 2"), None, "a truncated line");
        assert_eq!(stat_cpu_ticks("no parenthesis here"), None);
    }
}
