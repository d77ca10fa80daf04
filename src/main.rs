//! The `keyhaven` binary: the headless engine and its command line. The only place that reads
//! the environment and the platform's directories; everything else gets its config as a value.

use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use keyhaven::app::host::{self, Host, Paths};
use keyhaven::app::supervisor::{Supervisor, SupervisorOptions};
use keyhaven::config::{self, FileConfig};
use keyhaven::control::logs::LogRing;
use keyhaven::control::token::ControlToken;
use keyhaven::pricing::PriceTable;
use keyhaven::provider::Catalog;
use keyhaven::proxy::InterceptList;
use keyhaven::proxy::ca::{self, CaOrigin, CaPaths, LocalCa};
use keyhaven::proxy::trust::{self, RootRef, StoreReport, TrustEnv};
use keyhaven::secrets::{Keyring, OsKeyring, Secrets};
use keyhaven::setup::{self, Client, ClientTokens, SetupEnv, SetupOptions};
use keyhaven::store::{CallFilter, Store, StoreOptions};
use secrecy::SecretString;

#[derive(Parser, Debug)]
#[command(name = "keyhaven", version, about = "A local AI gateway for your own provider keys")]
struct Cli {
    /// The config file (default: the platform config dir, e.g. ~/.config/keyhaven/config.toml).
    #[arg(long, global = true, env = "KEYHAVEN_CONFIG")]
    config: Option<PathBuf>,
    /// Where the call database lives (default: the platform data dir).
    #[arg(long, global = true, env = "KEYHAVEN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// `--csv|--json` and the window of `usage` and `calls`.
#[derive(clap::Args, Debug)]
struct ExportArgs {
    /// Print CSV (a header row, RFC 4180 quoting).
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print JSON (an array of objects).
    #[arg(long)]
    json: bool,
    /// From this UTC day (2026-11-30) or RFC 3339 time (2026-11-30T09:00:00Z).
    #[arg(long)]
    since: Option<String>,
    /// Through this UTC day, or up to this RFC 3339 time (exclusive); default now.
    #[arg(long)]
    until: Option<String>,
}

impl ExportArgs {
    fn format(&self) -> Option<keyhaven::control::export::Format> {
        use keyhaven::control::export::Format;
        if self.csv {
            Some(Format::Csv)
        } else if self.json {
            Some(Format::Json)
        } else {
            None
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway (the default).
    Serve {
        /// Listen address, overriding the config (loopback unless you mean otherwise).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// List the configured models.
    Models,
    /// Manage provider keys in the OS keyring.
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
    /// Tokens and cost by day and model; with --csv or --json, every day, model, provider and
    /// client of the window.
    Usage {
        /// The last N UTC days, today included (when --since is not given).
        #[arg(long, default_value_t = 7)]
        days: u32,
        #[command(flatten)]
        export: ExportArgs,
    },
    /// Recent calls; with --csv or --json, every call of the window (no bodies), oldest first.
    Calls {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[command(flatten)]
        export: ExportArgs,
    },
    /// Check the keyring, the ports, the CA in each trust store, each client's routing, each
    /// provider with its key (one cheap request) and Cursor's HTTP/2 setting; say what to do.
    Doctor,
    /// Point a client at Keyhaven (with a backup), or undo it with --undo.
    Setup {
        #[command(subcommand)]
        target: SetupTarget,
    },
    /// The local CA that lets the proxy decrypt Cursor's API hosts (and only those).
    Ca {
        #[command(subcommand)]
        action: CaAction,
    },
    /// Print a one-time link to the running engine's web dashboard (the token is never printed).
    Dashboard,
    /// The price table in use (its version) and each configured model's price and its source;
    /// `set` / `unset` override a model's prices (new calls only: history is never re-priced).
    Prices {
        #[command(subcommand)]
        action: Option<PricesAction>,
    },
}

#[derive(Subcommand, Debug)]
enum PricesAction {
    /// Override a configured model's prices (USD per million tokens, e.g. `--input 3.00`).
    Set {
        model: String,
        #[arg(long)]
        input: String,
        #[arg(long)]
        output: String,
        /// Default: the price table's.
        #[arg(long)]
        cache_read: Option<String>,
        /// Default: the price table's.
        #[arg(long)]
        cache_write: Option<String>,
    },
    /// Remove a model's price override (the price table's applies again).
    Unset { model: String },
}

#[derive(Subcommand, Debug)]
enum CaAction {
    /// Show the root, where its key is kept, and whether each trust store has it.
    Status,
    /// Create the root if needed and trust it (Linux: system bundle needs sudo; NSS user db).
    Install,
    /// Remove every Keyhaven root from every trust store.
    Uninstall,
    /// Replace the root: remove the old one from every store and the keyring, create a new one,
    /// and trust it where the old one was trusted.
    Rotate,
    /// Print the root certificate (PEM), e.g. for NODE_EXTRA_CA_CERTS.
    Export,
}

#[derive(Subcommand, Debug)]
enum SetupTarget {
    /// Cursor: proxy settings in Cursor's user settings.json.
    Cursor(SetupArgs),
    /// Claude Code: the `env` block of ~/.claude/settings.json.
    ClaudeCode(SetupArgs),
    /// Codex CLI: a `keyhaven` model provider in ~/.codex/config.toml.
    Codex(SetupArgs),
    /// Print shell exports for OpenAI- and Anthropic-compatible tools; changes no file.
    Env(SetupArgs),
    /// Show which clients are installed and routed.
    Status,
}

#[derive(clap::Args, Debug)]
struct SetupArgs {
    /// Put the client's config back as it was before Keyhaven changed it.
    #[arg(long)]
    undo: bool,
    /// Print the exact change and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The model the client asks for (Claude Code, Codex; default for Codex: the first configured model).
    #[arg(long)]
    model: Option<String>,
    /// Claude Code's small, fast model.
    #[arg(long)]
    small_model: Option<String>,
    /// Cursor: set `cursor.general.disableHttp2` (for the HTTP/1.1 transport).
    #[arg(long)]
    disable_http2: bool,
    /// Keyhaven's proxy URL for Cursor.
    #[arg(long, default_value = DEFAULT_PROXY_URL)]
    proxy_url: String,
}

/// Where the intercepting proxy listens until its own config lands (the proxy issue).
const DEFAULT_PROXY_URL: &str = "http://127.0.0.1:4938";

#[derive(Subcommand, Debug)]
enum KeyAction {
    /// Store a key (read from standard input) under NAME; reference it as key = "keyring:NAME".
    /// The key is bound to one origin and never sent anywhere else: the base URL of the providers
    /// in the config file that use `keyring:NAME`, or `--origin`.
    Set {
        name: String,
        /// The URL (or origin) the key is for, e.g. https://api.anthropic.com.
        #[arg(long)]
        origin: Option<String>,
    },
    /// Remove the key stored under NAME.
    Rm { name: String },
}

/// The machine as this binary finds it: the only place (with the tray app's `main`) that asks
/// the environment and the platform's directories.
/// The system's UTC offset in seconds, read at the start of `main` (`None`: the platform would
/// not say).
static LOCAL_OFFSET: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();

fn host() -> Host {
    let dirs = directories::ProjectDirs::from("dev", "keyhaven", "keyhaven");
    Host {
        home: directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()),
        config_dir: dirs.as_ref().map(|d| d.config_dir().to_path_buf()),
        data_dir: dirs.as_ref().map(|d| d.data_dir().to_path_buf()),
        appdata: std::env::var_os("APPDATA").map(PathBuf::from),
        temp_dir: std::env::temp_dir(),
        cwd: std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir()),
        // The system's zone for budget periods, read by `main` before any other thread started.
        local_offset_s: LOCAL_OFFSET.get().copied().flatten(),
    }
}

fn load_config(path: &Path, out: &mut impl Write) -> anyhow::Result<FileConfig> {
    Ok(host::load_config(path, out)?)
}

fn main() -> anyhow::Result<()> {
    // First, while this is the only thread: on Unix the platform's local offset can be read
    // safely only then (the `time` crate refuses once other threads run), and budgets need it.
    LOCAL_OFFSET.get_or_init(|| time::UtcOffset::current_local_offset().ok().map(time::UtcOffset::whole_seconds));
    let cli = Cli::parse();
    // The engine never installs a subscriber: the binary does, with a layer feeding the control
    // API's live log tail.
    let logs = LogRing::default();
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        // `doctor` runs a private engine whose start-up lines would bury the report.
        let quiet = matches!(cli.command, Some(Command::Doctor));
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(if quiet { "warn" } else { "info" }));
        tracing_subscriber::registry()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .with(logs.layer())
            .init();
    }
    let host = host();
    let paths = host.paths(cli.config.clone(), cli.data_dir.clone())?;
    let mut out = std::io::stdout().lock();
    match cli.command.unwrap_or(Command::Serve { listen: None }) {
        Command::Serve { listen } => {
            let (mut config, extras) = host.serve_config(&paths, Some(logs), &mut out)?;
            drop(out);
            config.listen = listen;
            serve(config, extras, paths.data)
        }
        Command::Dashboard => dashboard(&paths, &mut out),
        Command::Models => {
            let file = load_config(&paths.config, &mut out)?;
            let prices = PriceTable::builtin()?;
            let catalog = Catalog::new(&file, &prices).map_err(anyhow::Error::msg)?;
            if catalog.models().is_empty() {
                writeln!(out, "No models configured. Edit {}.", paths.config.display())?;
            }
            writeln!(out, "{:<16}  {:<28}  {:<14}  {:<30}  price $/Mtok in/out", "ID", "NAME", "PROVIDER", "UPSTREAM")?;
            for m in catalog.models() {
                let price = m.price.map_or("-".to_owned(), |p| format!("{}/{}", dollars(p.input), dollars(p.output)));
                writeln!(out, "{:<16}  {:<28}  {:<14}  {:<30}  {price}", m.id, m.name, m.provider, m.upstream)?;
                if !m.aliases.is_empty() {
                    writeln!(out, "{:<16}  aliases: {}", "", m.aliases.join(", "))?;
                }
            }
            Ok(())
        }
        Command::Key { action } => {
            let file = match std::fs::read_to_string(&paths.config) {
                Ok(text) => Some(config::load_str(&paths.config.display().to_string(), &text)?),
                Err(_) => None,
            };
            key(action, file.as_ref(), &mut out)
        }
        Command::Usage { days, export } => match export.format() {
            Some(format) => {
                let today = time::OffsetDateTime::now_utc().date();
                let first = today.saturating_sub(time::Duration::days(i64::from(days.max(1)) - 1));
                let default_since = first.midnight().assume_utc().unix_timestamp() * 1000;
                export_command(&paths.database, "usage", &export, format, default_since, &mut out)
            }
            None => usage(&paths.database, days, &mut out),
        },
        Command::Calls { limit, export } => match export.format() {
            Some(format) => export_command(&paths.database, "calls", &export, format, 0, &mut out),
            None => calls(&paths.database, limit, &mut out),
        },
        Command::Doctor => doctor(&host, &paths, &mut out),
        Command::Prices { action: Some(action) } => prices_edit(&paths, action, &mut out),
        Command::Prices { action: None } => {
            let file = load_config(&paths.config, &mut out)?;
            let report =
                keyhaven::control::prices::report(&file, &PriceTable::builtin()?).map_err(anyhow::Error::msg)?;
            writeln!(out, "Price table {} ({} per million tokens)", report.version, report.currency)?;
            writeln!(
                out,
                "{:<28}  {:<14}  {:<30}  {:<7}  {:>11}  {:>11}  {:>11}  {:>11}  VERSION",
                "MODEL", "PROVIDER", "UPSTREAM", "SOURCE", "INPUT", "OUTPUT", "CACHE RD", "CACHE WR"
            )?;
            for m in &report.models {
                let source = match m.source {
                    keyhaven::control::dto::PriceSource::Table => "table",
                    keyhaven::control::dto::PriceSource::Config => "config",
                    keyhaven::control::dto::PriceSource::None => "none",
                };
                let [i, o, r, w] = m.per_mtok.as_ref().map_or_else(
                    || ["-".to_owned(), "-".to_owned(), "-".to_owned(), "-".to_owned()],
                    |p| [p.input.clone(), p.output.clone(), p.cache_read.clone(), p.cache_write.clone()],
                );
                writeln!(
                    out,
                    "{:<28}  {:<14}  {:<30}  {:<7}  {i:>11}  {o:>11}  {r:>11}  {w:>11}  {}",
                    m.name,
                    m.provider,
                    m.upstream,
                    source,
                    m.version.as_deref().unwrap_or("-")
                )?;
            }
            Ok(())
        }
        Command::Setup { target } => setup_command(&paths, target, &mut out),
        Command::Ca { action } => {
            let file = load_config(&paths.config, &mut out)?;
            ca(action, &paths, &file, &mut out)
        }
    }
}

fn trust_env() -> anyhow::Result<TrustEnv> {
    host().trust_env().context("cannot find your home directory")
}

fn root_ref(ca: &LocalCa, paths: &Paths) -> RootRef {
    let nickname = x509_common_name(ca).unwrap_or_else(|| ca::ROOT_CN_PREFIX.to_owned());
    RootRef {
        pem: ca.cert_pem().to_owned(),
        path: CaPaths::new(&paths.ca_dir).cert(),
        nickname,
        sha1: ca.fingerprint_sha1(),
    }
}

fn x509_common_name(ca: &LocalCa) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(ca.cert_der().as_ref()).ok()?;
    cert.subject().iter_common_name().next()?.as_str().ok().map(str::to_owned)
}

fn print_reports(out: &mut impl Write, reports: &[StoreReport]) -> anyhow::Result<bool> {
    let mut ok = true;
    for r in reports {
        writeln!(out, "  {:<20} {}", r.store, r.outcome)?;
        ok &= !r.outcome.is_failure();
    }
    Ok(ok)
}

fn describe(out: &mut impl Write, ca: &LocalCa, paths: &Paths) -> anyhow::Result<()> {
    writeln!(out, "Local CA:    {}", CaPaths::new(&paths.ca_dir).cert().display())?;
    writeln!(out, "SHA-256:     {}", ca.fingerprint_sha256())?;
    writeln!(out, "Valid until: {}", ca.not_after().date())?;
    writeln!(out, "Limited to:  {} (and their subdomains; name-constrained)", ca.intercept().domains().join(", "))?;
    writeln!(out, "Private key: {}", ca.key_location())?;
    Ok(())
}

fn ca(action: CaAction, paths: &Paths, file: &FileConfig, out: &mut impl Write) -> anyhow::Result<()> {
    let intercept = InterceptList::new(&file.proxy.intercept);
    let ca_paths = CaPaths::new(&paths.ca_dir);
    let keyring = OsKeyring;
    let now = time::OffsetDateTime::now_utc();
    match action {
        CaAction::Status => {
            let Some(ca) = LocalCa::load(&ca_paths, &keyring, &intercept, now)? else {
                writeln!(out, "No local CA yet: `keyhaven ca install` creates and trusts one.")?;
                return Ok(());
            };
            describe(out, &ca, paths)?;
            writeln!(out, "Trust stores:")?;
            print_reports(out, &trust::status(&trust_env()?, &root_ref(&ca, paths)))?;
        }
        CaAction::Install => {
            let (ca, origin) = LocalCa::load_or_create(&ca_paths, &keyring, &intercept, now)?;
            if origin == CaOrigin::Created {
                writeln!(out, "Created a new local CA.")?;
            }
            describe(out, &ca, paths)?;
            writeln!(out, "Installing:")?;
            let ok = print_reports(out, &trust::install(&trust_env()?, &root_ref(&ca, paths)))?;
            writeln!(out, "{}", trust::RESTART_HINT)?;
            if !ok {
                bail!("the root is not trusted everywhere (see above)");
            }
        }
        CaAction::Uninstall => {
            writeln!(out, "Removing every Keyhaven root:")?;
            if !print_reports(out, &trust::uninstall(&trust_env()?))? {
                bail!("some stores could not be cleaned (see above)");
            }
        }
        CaAction::Rotate => {
            let env = trust_env()?;
            let was_trusted = match LocalCa::load(&ca_paths, &keyring, &intercept, now) {
                Ok(Some(old)) => trust::status(&env, &root_ref(&old, paths))
                    .iter()
                    .any(|r| matches!(r.outcome, trust::Outcome::Present | trust::Outcome::Stale)),
                _ => true,
            };
            writeln!(out, "Removing the old root from every trust store:")?;
            let cleaned = print_reports(out, &trust::uninstall(&env))?;
            if !cleaned {
                bail!("the old root could not be removed everywhere; fix that first (see above)");
            }
            ca::remove_root(&ca_paths, &keyring)?;
            let ca = LocalCa::create(&ca_paths, &keyring, &intercept, now)?;
            writeln!(out, "Created a new local CA.")?;
            describe(out, &ca, paths)?;
            if was_trusted {
                writeln!(out, "Installing:")?;
                let ok = print_reports(out, &trust::install(&env, &root_ref(&ca, paths)))?;
                writeln!(out, "{}", trust::RESTART_HINT)?;
                if !ok {
                    bail!("the new root is not trusted everywhere (see above)");
                }
            }
        }
        CaAction::Export => {
            let (ca, _) = LocalCa::load_or_create(&ca_paths, &keyring, &intercept, now)?;
            write!(out, "{}", ca.cert_pem())?;
        }
    }
    Ok(())
}

fn dollars(micros_per_mtok: u64) -> String {
    format!("{:.2}", micros_per_mtok as f64 / 1e6)
}

/// A one-time link to the web dashboard of the running engine: the CLI holds the 0600 token file
/// and asks the engine (`POST /api/session/nonce`) for a nonce; the browser trades it for a
/// session cookie. The token itself is never printed.
/// `keyhaven prices set|unset`: through the running engine's control API when one answers (it
/// writes the config file and prices new calls with the override at once), else an edit of the
/// config file (read at the next start).
fn prices_edit(paths: &Paths, action: PricesAction, out: &mut impl Write) -> anyhow::Result<()> {
    use keyhaven::control::dto::PriceOverrideInput;
    let (model, input) = match action {
        PricesAction::Set { model, input, output, cache_read, cache_write } => {
            (model, Some(PriceOverrideInput { input, output, cache_read, cache_write }))
        }
        PricesAction::Unset { model } => (model, None),
    };
    let text = std::fs::read_to_string(&paths.config)
        .with_context(|| format!("cannot read the config file {}", paths.config.display()))?;
    let listen = config::load_str(&paths.config.display().to_string(), &text)?.server.listen;
    let token = ControlToken::load_or_create(&paths.data)?;
    let path = format!("/api/prices/{}", percent_encode_segment(&model));
    let (method, body) = match &input {
        Some(i) => ("PUT", Some(serde_json::to_value(i)?)),
        None => ("DELETE", None),
    };
    match host::control_request(listen, &token, method, &path, body.as_ref()) {
        Ok((200, report)) => {
            let version = report["models"]
                .as_array()
                .and_then(|ms| ms.iter().find(|m| m["name"] == model.as_str()))
                .and_then(|m| m["version"].as_str())
                .unwrap_or("-")
                .to_owned();
            let what = if input.is_some() { "set" } else { "removed" };
            writeln!(out, "Price override of `{model}` {what}; new calls are priced with version {version}.")?;
            Ok(())
        }
        Ok((status, body)) => {
            anyhow::bail!("the engine refused it (HTTP {status}): {}", body["message"].as_str().unwrap_or("no message"))
        }
        Err(host::HostError::NotRunning { .. }) => {
            keyhaven::control::prices::edit_file(&paths.config, &model, input.as_ref(), keyhaven::clock::now_ms())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let what = if input.is_some() { "set" } else { "removed" };
            writeln!(
                out,
                "Price override of `{model}` {what} in {} (Keyhaven is not running: it applies at the next start).",
                paths.config.display()
            )?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// A path segment with everything but unreserved characters percent-encoded.
fn percent_encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn dashboard(paths: &Paths, out: &mut impl Write) -> anyhow::Result<()> {
    let token = ControlToken::load_or_create(&paths.data)?;
    let listen = if paths.config.exists() {
        let text = std::fs::read_to_string(&paths.config)?;
        config::load_str(&paths.config.display().to_string(), &text)?.server.listen
    } else {
        config::ServerConfig::default().listen
    };
    let url = host::request_dashboard_link(listen, &token)?;
    writeln!(out, "Open the dashboard: {url}")?;
    writeln!(out, "  (works once, within a minute; needs [server] ui_dir, or the app's headless mode)")?;
    let api = host::loopback(listen);
    writeln!(
        out,
        "Scripts: curl -H \"Authorization: Bearer $(cat {})\" http://{api}/api/status",
        ControlToken::path(&paths.data).display()
    )?;
    Ok(())
}

fn serve(
    config: keyhaven::config::EngineConfig,
    extras: keyhaven::app::EngineExtras,
    data_dir: PathBuf,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let env = Arc::new(|name: &str| std::env::var(name).ok());
        let secrets = Secrets::new(Arc::new(OsKeyring), env);
        let models = config.file.models.len();
        let ui = config.file.server.ui_dir.as_ref().is_some_and(|d| d.is_dir());
        // The same supervisor as the tray app: a stop drains, and restores routed clients when
        // `[setup] restore_on_stop` is on.
        let supervisor = Supervisor::new(SupervisorOptions {
            config: Arc::new(move || Ok(config.clone())),
            secrets,
            extras,
            grace: Duration::from_secs(10),
            autostart: None,
        });
        let handle = supervisor.start().await?;
        // A closed stdout (a supervisor that stopped reading) must not stop the gateway.
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{}", host::banner(&handle, models, ui, &data_dir));
        let _ = out.flush();
        drop(out);
        shutdown_signal().await;
        tracing::info!("shutting down");
        // The supervisor logs what the stop restored and any notes.
        supervisor.shutdown().await;
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn key(action: KeyAction, file: Option<&FileConfig>, out: &mut impl Write) -> anyhow::Result<()> {
    let keyring = OsKeyring;
    match action {
        KeyAction::Set { name, origin } => {
            let origin = match origin {
                Some(o) => {
                    keyhaven::secrets::origin_of(&o).with_context(|| format!("--origin `{o}` is not an http(s) URL"))?
                }
                None => {
                    let origins: std::collections::BTreeSet<String> = file
                        .map(keyhaven::secrets::key_origins)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(k, _)| *k == config::KeyRef::Keyring(name.clone()))
                        .map(|(_, o)| o)
                        .collect();
                    match origins.len() {
                        1 => origins.into_iter().next().unwrap_or_default(),
                        0 => bail!(
                            "no provider in the config uses keyring:{name}; say which server the key is for with \
                             --origin https://…"
                        ),
                        _ => bail!(
                            "keyring:{name} is used for {}; a key is bound to one origin, so give each its own \
                             entry, or choose with --origin",
                            origins.into_iter().collect::<Vec<_>>().join(" and ")
                        ),
                    }
                }
            };
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                write!(out, "Paste the key for `{name}` ({origin}) and press Enter: ")?;
                out.flush()?;
            }
            let mut line = String::new();
            stdin.lock().read_line(&mut line)?;
            let value = SecretString::from(line.trim().to_owned());
            let secrets = Secrets::new(Arc::new(keyring), Arc::new(|_: &str| None));
            secrets.store(&name, &origin, &value).context("storing the key in the OS keyring")?;
            writeln!(
                out,
                "Stored `{name}` in the OS keyring, for {origin} only. Reference it as key = \"keyring:{name}\"."
            )?;
        }
        KeyAction::Rm { name } => {
            if keyring.delete(&name)? {
                writeln!(out, "Removed `{name}`.")?;
            } else {
                writeln!(out, "No key named `{name}`.")?;
            }
        }
    }
    Ok(())
}

fn open_store(db: &Path) -> anyhow::Result<Store> {
    if !db.exists() {
        bail!("no call history yet at {} (run `keyhaven serve` first)", db.display());
    }
    Ok(Store::open(db, StoreOptions::default())?)
}

fn usage(db: &Path, days: u32, out: &mut impl Write) -> anyhow::Result<()> {
    let store = open_store(db)?;
    let since = time::OffsetDateTime::now_utc() - time::Duration::days(i64::from(days.max(1)) - 1);
    let since = format!("{:04}-{:02}-{:02}", since.year(), u8::from(since.month()), since.day());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let rows = rt.block_on(store.usage_by_day(&since))?;
    writeln!(
        out,
        "{:<10}  {:<28}  {:>6}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}",
        "DAY", "MODEL", "CALLS", "ERRORS", "INPUT", "OUTPUT", "CACHE RD", "CACHE WR", "COST $"
    )?;
    let mut total = 0i64;
    for r in &rows {
        total += r.cost_micros;
        writeln!(
            out,
            "{:<10}  {:<28}  {:>6}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10.4}",
            r.day,
            r.model,
            r.calls,
            r.errors,
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.usage.cache_read_tokens,
            r.usage.cache_write_tokens,
            r.cost_micros as f64 / 1e6
        )?;
    }
    writeln!(out, "total cost since {since}: ${:.4}", total as f64 / 1e6)?;
    store.close()?;
    Ok(())
}

/// `usage|calls --csv|--json`: the same export the dashboard downloads.
fn export_command(
    db: &Path,
    what: &str,
    args: &ExportArgs,
    format: keyhaven::control::export::Format,
    default_since_ms: i64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use keyhaven::control::export;
    let range =
        export::Range::parse(args.since.as_deref(), args.until.as_deref(), default_since_ms, keyhaven::clock::now_ms())
            .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let store = open_store(db)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let text = rt.block_on(async {
        if what == "usage" {
            export::usage(&store, range, format).await
        } else {
            export::calls(&store, range, format).await
        }
    });
    store.close()?;
    let text = text.map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    out.write_all(text.as_bytes())?;
    if format == export::Format::Json {
        writeln!(out)?;
    }
    Ok(())
}

fn calls(db: &Path, limit: u32, out: &mut impl Write) -> anyhow::Result<()> {
    let store = open_store(db)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let rows = rt.block_on(store.recent_calls(CallFilter { limit, ..CallFilter::default() }))?;
    writeln!(
        out,
        "{:<20}  {:<11}  {:<12}  {:<24}  {:>8}  {:>8}  {:>8}  {:>9}  ERROR",
        "STARTED (UTC)", "STATUS", "DIALECT", "MODEL", "IN", "OUT", "MS", "COST $"
    )?;
    for c in &rows {
        let started = time::OffsetDateTime::from_unix_timestamp(c.started_ms / 1000)
            .map(|t| {
                format!(
                    "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
                    t.year(),
                    u8::from(t.month()),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second()
                )
            })
            .unwrap_or_default();
        writeln!(
            out,
            "{:<20}  {:<11}  {:<12}  {:<24}  {:>8}  {:>8}  {:>8}  {:>9}  {}",
            started,
            c.status.as_str(),
            c.dialect,
            c.model,
            c.usage.input_tokens + c.usage.cache_read_tokens + c.usage.cache_write_tokens,
            c.usage.output_tokens,
            c.total_ms.map_or("-".into(), |v| v.to_string()),
            c.cost_micros.map_or("-".into(), |v| format!("{:.4}", v as f64 / 1e6)),
            c.error_kind.as_deref().unwrap_or("")
        )?;
    }
    store.close()?;
    Ok(())
}

/// The user's home, platform and Keyhaven's endpoints, from the real environment.
fn setup_env(paths: &Paths, file: Option<&FileConfig>, proxy_url: &str) -> anyhow::Result<SetupEnv> {
    host().setup_env(paths, file, proxy_url).context("cannot find your home directory")
}

fn setup_command(paths: &Paths, target: SetupTarget, out: &mut impl Write) -> anyhow::Result<()> {
    // The config is read only for the listen address and model names; a missing one is not
    // created here (setup must not have side effects beyond what it prints).
    let file = if paths.config.exists() {
        let text =
            std::fs::read_to_string(&paths.config).with_context(|| format!("reading {}", paths.config.display()))?;
        Some(config::load_str(&paths.config.display().to_string(), &text)?)
    } else {
        None
    };
    let (client, args) = match target {
        SetupTarget::Status => {
            let env = setup_env(paths, file.as_ref(), DEFAULT_PROXY_URL)?;
            for client in Client::ALL {
                let d = setup::detect(&env, client)?;
                writeln!(
                    out,
                    "{:<12} installed: {:<3}  routed: {:<3}  undo possible: {:<3}  {}",
                    client.as_str(),
                    yes(d.installed),
                    yes(d.routed),
                    yes(d.recorded),
                    d.config_path.display()
                )?;
            }
            return Ok(());
        }
        SetupTarget::Env(args) => {
            let env = setup_env(paths, file.as_ref(), &args.proxy_url)?;
            return setup_env_vars(&env, &args, out);
        }
        SetupTarget::Cursor(a) => (Client::Cursor, a),
        SetupTarget::ClaudeCode(a) => (Client::ClaudeCode, a),
        SetupTarget::Codex(a) => (Client::Codex, a),
    };
    let env = setup_env(paths, file.as_ref(), &args.proxy_url)?;
    let tokens = ClientTokens::new(Arc::new(OsKeyring), &env.data_dir);
    let plan = if args.undo {
        setup::plan_undo(&env, client, &tokens)?
    } else {
        let mut model = args.model.clone();
        if model.is_none() && client == Client::Codex {
            model = file.as_ref().and_then(|f| f.models.first()).map(|m| m.name.get_ref().clone());
        }
        let tool_search = client == Client::ClaudeCode
            && file.as_ref().zip(model.as_deref()).is_some_and(|(f, m)| setup::serves_on_anthropic(f, m));
        let opts = SetupOptions {
            model,
            small_model: args.small_model.clone(),
            disable_http2: args.disable_http2,
            tool_search,
        };
        setup::plan_route(&env, client, &opts, &tokens)?
    };
    if args.dry_run {
        if plan.changes_file() {
            write!(out, "{}", plan.diff())?;
        } else {
            writeln!(out, "{} would stay as it is.", plan.path().display())?;
        }
        for note in plan.notes() {
            writeln!(out, "note: {note}")?;
        }
        writeln!(out, "(dry run: nothing was changed)")?;
        return Ok(());
    }
    let outcome = plan.apply(&env, &tokens)?;
    let what = if args.undo { "restored" } else { "routed through Keyhaven" };
    if outcome.changed {
        writeln!(out, "{}: {} {what}.", client.display_name(), outcome.path.display())?;
    } else {
        writeln!(out, "{}: {} already {what}; nothing to change.", client.display_name(), outcome.path.display())?;
    }
    if let Some(b) = &outcome.backup {
        writeln!(out, "Backup of the original: {}", b.display())?;
    }
    for note in &outcome.notes {
        writeln!(out, "note: {note}")?;
    }
    if outcome.changed {
        writeln!(out, "{}", client.restart_hint())?;
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// `keyhaven setup env`: prints exports (or unsets with --undo) for the generic `env` client.
fn setup_env_vars(env: &SetupEnv, args: &SetupArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let tokens = ClientTokens::new(Arc::new(OsKeyring), &env.data_dir);
    if args.undo {
        if !args.dry_run {
            tokens.revoke(setup::ENV_CLIENT)?;
        }
        write!(out, "{}", setup::env_unsets(env))?;
        return Ok(());
    }
    let token = if args.dry_run {
        tokens.get(setup::ENV_CLIENT)?.map_or_else(
            || "kh-<issued when run without --dry-run>".to_owned(),
            |t| secrecy::ExposeSecret::expose_secret(&t).to_owned(),
        )
    } else {
        secrecy::ExposeSecret::expose_secret(&tokens.issue(setup::ENV_CLIENT)?).to_owned()
    };
    write!(out, "{}", setup::env_exports(env, &token))?;
    Ok(())
}

/// `keyhaven doctor`: the checks of the control service's `doctor`, run by a private engine that
/// listens on ephemeral loopback ports with its own temporary database (a running Keyhaven is
/// not disturbed, and its in-flight rows are not touched), plus whether the configured ports are
/// free or answered by a running Keyhaven. Exits non-zero when a check fails.
fn doctor(host: &Host, paths: &Paths, out: &mut impl Write) -> anyhow::Result<()> {
    use keyhaven::control::dto::{DoctorCheck, DoctorStatus};
    let (mut config, extras) = host.serve_config(paths, None, out)?;
    let token = ControlToken::load_or_create(&paths.data)?;
    let mut ports = vec![port_check("The gateway port", config.file.server.listen, Some(&token))];
    if config.file.proxy.enabled {
        ports.push(port_check("The Cursor proxy port", config.file.proxy.listen, None));
    }
    let scratch = std::env::temp_dir().join(format!("keyhaven-doctor-{}-{:x}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&scratch)?;
    config.database_path = scratch.join("doctor.db");
    config.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.file.proxy.enabled = false;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(async move {
        let env = Arc::new(|name: &str| std::env::var(name).ok());
        let secrets = Secrets::new(Arc::new(OsKeyring), env);
        let engine = keyhaven::app::Engine::start_with(config, secrets, extras).await?;
        let report = engine.handle().control().doctor().await;
        engine.shutdown(Duration::from_secs(5)).await;
        anyhow::Ok(report)
    });
    let _ = std::fs::remove_dir_all(&scratch);
    let mut report = report?;
    report.checks.retain(|c| c.area != "ports");
    let checks: Vec<DoctorCheck> = ports.into_iter().chain(report.checks).collect();
    let mut failed = 0;
    for c in &checks {
        let mark = match c.status {
            DoctorStatus::Ok => "ok  ",
            DoctorStatus::Warn => "warn",
            DoctorStatus::Fail => "FAIL",
            DoctorStatus::Skip => "skip",
        };
        failed += usize::from(c.status == DoctorStatus::Fail);
        writeln!(out, "[{mark}] {}: {}", c.title, c.detail)?;
        if let Some(fix) = &c.fix {
            writeln!(out, "       → {fix}")?;
        }
    }
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    writeln!(out, "No check failed.")?;
    Ok(())
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::from(d.subsec_nanos()))
}

/// Free, answered by a running Keyhaven (the control API with the token), or taken by another
/// program.
fn port_check(title: &str, addr: SocketAddr, token: Option<&ControlToken>) -> keyhaven::control::dto::DoctorCheck {
    use keyhaven::control::dto::{DoctorCheck, DoctorStatus};
    let c = |status, detail: String, fix: Option<String>| DoctorCheck {
        area: "ports".to_owned(),
        title: format!("{title} {addr}"),
        status,
        detail,
        fix,
    };
    match std::net::TcpListener::bind(addr) {
        Ok(_) => c(DoctorStatus::Ok, "free (Keyhaven is not running)".to_owned(), None),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            if token.is_some_and(|t| keyhaven_answers(addr, t)) {
                c(DoctorStatus::Ok, "a running Keyhaven answers there".to_owned(), None)
            } else if token.is_none() {
                c(
                    DoctorStatus::Warn,
                    "in use (by a running Keyhaven, or by another program)".to_owned(),
                    Some("If Keyhaven is not running, free the port or change [proxy] listen".to_owned()),
                )
            } else {
                c(
                    DoctorStatus::Fail,
                    "in use by another program".to_owned(),
                    Some("Stop that program or change [server] listen in the config".to_owned()),
                )
            }
        }
        Err(e) => c(DoctorStatus::Fail, format!("cannot listen: {e}"), Some("Check [server] listen".to_owned())),
    }
}

/// `GET /api/status` with the control token answers 200.
fn keyhaven_answers(addr: SocketAddr, token: &ControlToken) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!(
        "GET /api/status HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        token.expose()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}
