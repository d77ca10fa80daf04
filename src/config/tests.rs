//! Config parsing and validation tests.

use crate::config::{
    BudgetAction, BudgetPeriod, ConfigError, KeyRef, ProviderKind, TEMPLATE, load_str, parse_time_zone,
};

const GOOD: &str = r#"
[server]
listen = "127.0.0.1:5000"

[[providers]]
name = "ant"
kind = "anthropic"
base_url = "https://api.anthropic.com/v1/"
key = "keyring:ant"

[[providers]]
name = "ds"
kind = "openai"
base_url = "https://api.deepseek.com/v1"
key = "env:DEEPSEEK_API_KEY"

[[models]]
name = "sonnet"
aliases = ["claude-sonnet-4-5"]
provider = "ant"
upstream = "claude-sonnet-4-5"
price = { input = "3", output = "15" }
"#;

#[test]
fn good_config_parses() {
    let c = load_str("c.toml", GOOD).expect("valid");
    assert_eq!(c.server.listen.port(), 5000);
    assert_eq!(c.providers[0].kind, ProviderKind::Anthropic);
    assert_eq!(c.providers[0].base_url(), "https://api.anthropic.com/v1");
    assert_eq!(c.providers[1].key, Some(KeyRef::Env("DEEPSEEK_API_KEY".into())));
    assert_eq!(c.models[0].aliases, vec!["claude-sonnet-4-5"]);
}

#[test]
fn template_is_valid_and_empty() {
    let c = load_str("t.toml", TEMPLATE).expect("template parses");
    assert!(c.providers.is_empty() && c.models.is_empty());
    // Uncommenting the examples must give a valid config too.
    let uncommented: String = TEMPLATE
        .lines()
        .map(|l| l.strip_prefix("# ").filter(|rest| is_toml_line(rest)).unwrap_or(""))
        .map(|l| format!("{l}\n"))
        .collect();
    let c = load_str("t.toml", &uncommented).expect("uncommented template parses");
    assert_eq!(c.providers.len(), 5);
    assert_eq!(c.models.len(), 5);
    assert_eq!(c.groups.len(), 1);
    assert_eq!(c.providers[4].kind, ProviderKind::Lingma);
    let fim = c.models.iter().find(|m| m.name() == "deepseek-fim").expect("the FIM example");
    assert_eq!(fim.fim_dialect(), Some(crate::config::FimDialect::Completions));
    assert_eq!(c.cursor_tab.local_model(), None, "Tab stays Cursor's unless chosen");
    assert_eq!(c.models[4].tools, crate::config::ToolsMode::Emulated);
    assert_eq!(c.models[4].timeouts.first_byte, Some(300_000));
    assert_eq!(c.budgets.len(), 1);
    assert_eq!(c.budgets[0].on_limit, BudgetAction::Downgrade);
    assert_eq!(c.time_zone.as_deref(), Some("local"));
}

#[test]
fn groups_must_name_known_models_and_not_clash() {
    let base = "[[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"http://x/v1\"\n\n[[models]]\nname = \"a\"\nprovider = \"p\"\nupstream = \"a\"\n";
    let ok = format!("{base}\n[[groups]]\nname = \"g\"\nmodels = [\"a\"]\n");
    assert!(load_str("c.toml", &ok).is_ok());
    let unknown = format!("{base}\n[[groups]]\nname = \"g\"\nmodels = [\"zz\"]\n");
    let err = load_str("c.toml", &unknown).expect_err("unknown member");
    assert!(err.to_string().contains("unknown model `zz`"), "{err}");
    let clash = format!("{base}\n[[groups]]\nname = \"a\"\nmodels = [\"a\"]\n");
    assert!(load_str("c.toml", &clash).is_err());
}

#[test]
fn unknown_field_names_line_and_field() {
    let text = "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n";
    let err = load_str("c.toml", text).expect_err("must fail");
    let ConfigError::Invalid { line, message, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*line, 3);
    assert!(message.contains("lisen"), "{message}");
    assert!(err.to_string().starts_with("c.toml:3:"), "{err}");
}

#[test]
fn plaintext_key_is_refused() {
    let text = "[[providers]]\nname = \"x\"\nkind = \"openai\"\nbase_url = \"http://h\"\nkey = \"sk-abc123\"\n";
    let err = load_str("c.toml", text).expect_err("must fail");
    assert!(err.to_string().contains("keys themselves never go in the config file"), "{err}");
    assert!(!err.to_string().contains("sk-abc123"), "the key must not be echoed: {err}");
}

#[test]
fn model_with_unknown_provider_points_at_its_line() {
    let text = GOOD.replace("provider = \"ant\"", "provider = \"nope\"");
    let err = load_str("c.toml", &text).expect_err("must fail");
    let ConfigError::Invalid { line, message, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*line, 20);
    assert!(message.contains("no provider named `nope`"), "{message}");
}

#[test]
fn duplicate_alias_is_refused() {
    let text = format!("{GOOD}\n[[models]]\nname = \"claude-sonnet-4-5\"\nprovider = \"ds\"\nupstream = \"x\"\n");
    let err = load_str("c.toml", &text).expect_err("must fail");
    assert!(err.to_string().contains("used twice"), "{err}");
}

#[test]
fn wrong_type_and_bad_url_are_refused() {
    let err = load_str("c.toml", "[server]\nretention_days = \"x\"\n").expect_err("must fail");
    assert!(matches!(err, ConfigError::Invalid { line: 2, .. }), "{err:?}");
    let err = load_str("c.toml", "[[providers]]\nname = \"x\"\nkind = \"openai\"\nbase_url = \"ftp://h\"\n")
        .expect_err("must fail");
    assert!(err.to_string().contains("not an http(s) URL"), "{err}");
    let err = load_str("c.toml", "[[providers]]\nname = \"x\"\nkind = \"gemini\"\nbase_url = \"http://h\"\n")
        .expect_err("must fail");
    assert!(matches!(err, ConfigError::Invalid { line: 3, .. }), "{err:?}");
}

/// A commented-out TOML line of the template (a table header or `key = value`), not prose.
fn is_toml_line(rest: &str) -> bool {
    if rest.starts_with('[') {
        return true;
    }
    let Some((key, _)) = rest.split_once(" = ") else { return false };
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[test]
fn openai_responses_kind_parses() {
    let text = "[[providers]]\nname = \"oa\"\nkind = \"openai-responses\"\nbase_url = \"https://api.openai.com/v1\"\n";
    let c = load_str("c.toml", text).expect("valid");
    assert_eq!(c.providers[0].kind, ProviderKind::OpenaiResponses);
    assert_eq!(c.providers[0].kind.as_str(), "openai-responses");
    assert_eq!(c.providers[0].kind.price_vendor(), "openai");
    let text = text.replace("openai-responses", "openai_responses");
    assert_eq!(load_str("c.toml", &text).expect("alias").providers[0].kind, ProviderKind::OpenaiResponses);
}

#[test]
fn lingma_providers_need_no_base_url_and_others_reject_lingma_fields() {
    let text = "[[providers]]\nname = \"lg\"\nkind = \"lingma\"\nsession_mode = \"fresh\"\nqueue = 2\nmodel_map = { a = \"b\" }\n";
    let c = load_str("c.toml", text).expect("lingma config");
    let p = &c.providers[0];
    assert_eq!(p.kind, ProviderKind::Lingma);
    assert_eq!(p.base_url(), "lingma://local");
    let o = p.lingma_options();
    assert_eq!(
        (o.session_mode, o.queue, o.timeout),
        (crate::config::SessionMode::Fresh, 2, crate::config::LINGMA_DEFAULT_TIMEOUT)
    );
    assert_eq!(o.model_map.get("a").map(String::as_str), Some("b"));
    let mut c = c;
    c.fill_lingma_defaults(
        std::path::Path::new("/h/.info.json"),
        std::path::Path::new("/t"),
        std::path::Path::new("/w"),
    );
    assert_eq!(c.providers[0].info_file.as_deref(), Some(std::path::Path::new("/h/.info.json")));
    let err =
        load_str("c.toml", "[[providers]]\nname = \"x\"\nkind = \"openai\"\nbase_url = \"http://h\"\nqueue = 1\n")
            .expect_err("lingma field on openai");
    assert!(err.to_string().contains("Lingma-only"), "{err}");
    let err = load_str("c.toml", "[[providers]]\nname = \"x\"\nkind = \"openai\"\n").expect_err("no base_url");
    assert!(err.to_string().contains("needs a base_url"), "{err}");
}

#[test]
fn cursor_table_and_model_routes_parse_with_defaults() {
    use crate::config::{CursorConfig, CursorHttp2, CursorRoute};
    let c = load_str("c.toml", GOOD).expect("valid");
    assert_eq!(c.cursor, CursorConfig::default());
    assert_eq!(c.cursor.first_message_wait, 30_000);
    assert_eq!(c.models[0].cursor, CursorRoute::Local);
    let text = GOOD
        .replace("upstream = \"claude-sonnet-4-5\"\n", "upstream = \"claude-sonnet-4-5\"\ncursor = \"upstream\"\n")
        + "[cursor]\nfirst_message_wait = 200\nhttp2 = \"bidi_disabled\"\n";
    let c = load_str("c.toml", &text).expect("valid");
    assert_eq!(c.models[0].cursor, CursorRoute::Upstream);
    assert_eq!((c.cursor.first_message_wait, c.cursor.gap_wait), (200, 30_000));
    assert_eq!(c.cursor.http2, CursorHttp2::BidiDisabled);
    for bad in ["[cursor]\ngap_wait = 0\n", "[cursor]\nhttp2 = \"sometimes\"\n", "[cursor]\nwait = 1\n"] {
        assert!(load_str("c.toml", &(GOOD.to_owned() + bad)).is_err(), "{bad}");
    }
    let bad_route =
        GOOD.replace("upstream = \"claude-sonnet-4-5\"\n", "upstream = \"claude-sonnet-4-5\"\ncursor = \"cloud\"\n");
    assert!(load_str("c.toml", &bad_route).is_err());
}

#[test]
fn web_section_defaults_and_validation() {
    use crate::config::{BRAVE_DEFAULT_URL, WebFetch, WebSearch};
    let c = load_str("c.toml", "").expect("empty");
    assert_eq!(c.web.search, WebSearch::None);
    assert_eq!(c.web.fetch, WebFetch::Keyhaven);
    assert_eq!(c.web.fetch_max_bytes, 2 * 1024 * 1024);
    assert_eq!(c.web.timeout, 20_000);
    assert_eq!(c.web.search_base_url(), None);
    assert_eq!(c.web.key_ref(), KeyRef::Keyring("brave-search".into()));

    let c = load_str("c.toml", "[web]\nsearch = \"brave\"\nfetch = \"editor\"\n").expect("brave");
    assert_eq!(c.web.search_base_url().as_deref(), Some(BRAVE_DEFAULT_URL));
    assert_eq!(c.web.fetch, WebFetch::Editor);
    let c =
        load_str("c.toml", "[web]\nsearch = \"searxng\"\nsearch_url = \"http://127.0.0.1:8888/\"\nkey = \"env:X\"\n")
            .expect("searxng");
    assert_eq!(c.web.search_base_url().as_deref(), Some("http://127.0.0.1:8888"));
    assert_eq!(c.web.key_ref(), KeyRef::Env("X".into()));

    let err = load_str("c.toml", "[web]\nsearch = \"searxng\"\n").expect_err("searxng needs a URL");
    assert!(err.to_string().contains("web.search_url"), "{err}");
    let err = load_str("c.toml", "[web]\nsearch_url = \"ftp://x.org\"\n").expect_err("http only");
    assert!(err.to_string().contains("not an http(s) URL"), "{err}");
    assert!(load_str("c.toml", "[web]\nsearch = \"google\"\n").is_err());
    assert!(load_str("c.toml", "[web]\nfetch_max_bytes = 0\n").is_err());
    assert!(load_str("c.toml", "[web]\ntimeout = 0\n").is_err());
    let err = load_str("c.toml", "[web]\nkey = \"BSA-plaintext\"\n").expect_err("no plaintext keys");
    assert!(err.to_string().contains("keyring:NAME"), "{err}");
}

#[test]
fn intercept_list_takes_only_cursor_domains() {
    let with = |list: &str| load_str("c.toml", &format!("{GOOD}\n[proxy]\nintercept = {list}\n"));
    for ok in [
        r#"["cursor.sh", "cursor.com"]"#,
        r#"["api2.cursor.sh"]"#,
        r#"["*.cursor.sh", "www.cursor.com"]"#,
        r#"["agent.global.api5.cursor.sh"]"#,
    ] {
        let c = with(ok).unwrap_or_else(|e| panic!("{ok} accepted: {e}"));
        assert!(!c.proxy.intercept.is_empty());
    }
    // Public suffixes, other sites, look-alikes and wildcards over a suffix are refused.
    for bad in ["com", "co.uk", "sh", "*.sh", "github.com", "evilcursor.sh", "cursor.sh.evil.com", "cursor.shx"] {
        let err = with(&format!("[\"{bad}\"]")).expect_err(bad).to_string();
        assert!(err.contains("proxy.intercept") && err.contains("Cursor's domains"), "{bad}: {err}");
    }
    // A malformed name keeps its own message.
    let err = with(r#"["Cursor.sh"]"#).expect_err("uppercase").to_string();
    assert!(err.contains("lowercase DNS domain"), "{err}");
    assert!(crate::config::is_cursor_domain("api2.cursor.sh"));
    assert!(!crate::config::is_cursor_domain(".cursor.sh"));
}

/// Issue 14 §6: a non-loopback gateway address needs `allow_remote` and required client tokens;
/// the proxy never listens beyond loopback.
#[test]
fn listening_beyond_loopback_needs_allow_remote_and_client_tokens() {
    let with = |server: &str, proxy: &str| load_str("c.toml", &format!("[server]\n{server}\n[proxy]\n{proxy}\n"));
    let refused = |server: &str, proxy: &str, what: &str| {
        let err = with(server, proxy).expect_err(what);
        let msg = err.to_string();
        assert!(matches!(err, ConfigError::Semantic { .. }), "{what}: {msg}");
        msg
    };
    for ok in ["listen = \"127.0.0.1:4937\"", "listen = \"[::1]:4937\"", "listen = \"127.0.0.2:4937\""] {
        with(ok, "").unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    let msg = refused("listen = \"0.0.0.0:4937\"", "", "a bare LAN address");
    assert!(msg.contains("server.listen") && msg.contains("allow_remote"), "{msg}");
    refused("listen = \"0.0.0.0:4937\"\nallow_remote = true", "", "allow_remote alone");
    refused("listen = \"192.168.1.20:4937\"\nrequire_client_token = true", "", "tokens alone");
    refused("listen = \"[::]:4937\"\nallow_remote = true", "", "IPv6 any, no tokens");
    let both = "listen = \"0.0.0.0:4937\"\nallow_remote = true\nrequire_client_token = true";
    let c = with(both, "").expect("allowed with both");
    assert!(c.server.allow_remote && c.server.require_client_token);
    let msg = refused(both, "listen = \"0.0.0.0:4938\"", "the proxy beyond loopback, even with allow_remote");
    assert!(msg.contains("proxy.listen"), "{msg}");
    refused("", "listen = \"10.0.0.5:4938\"\nenabled = false", "a disabled proxy too");
}

#[test]
fn budgets_are_validated_with_clear_errors() {
    let base = "[[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"https://x.example\"\n\
                [[models]]\nname = \"m\"\nprovider = \"p\"\nupstream = \"u\"\n";
    let ok = load_str("c.toml", &format!("time_zone = \"-05:30\"\n{base}[[budgets]]\nname = \"b\"\nlimit_usd = 5\n"))
        .expect("valid");
    assert_eq!(ok.budgets[0].soft_percent, 80);
    assert_eq!(ok.budgets[0].period, BudgetPeriod::Month);
    assert_eq!(ok.budgets[0].on_limit, BudgetAction::Refuse);
    assert_eq!(parse_time_zone(ok.time_zone.as_deref()), Ok(Some(-(5 * 3600 + 30 * 60))));
    let cases = [
        ("name = \"b\"\nlimit_usd = 0\n", "needs a limit above 0"),
        ("name = \"b\"\nlimit_usd = 1\nmodel = \"nope\"\n", "unknown model or group `nope`"),
        ("name = \"b\"\nlimit_usd = 1\nprovider = \"q\"\n", "unknown provider `q`"),
        (
            "name = \"b\"\nlimit_usd = 1\nprovider = \"p\"\nmodel = \"m\"\n",
            "more than one of client, provider and model",
        ),
        ("name = \"b\"\nlimit_usd = 1\non_limit = \"downgrade\"\n", "no downgrade_to"),
        ("name = \"b\"\nlimit_usd = 1\nsoft_percent = 0\n", "from 1 to 100"),
        ("name = \"b\"\nlimit_usd = 1\nperiod = \"year\"\n", "unknown variant `year`"),
        ("name = \"b\"\nlimit_usd = 1\n[[budgets]]\nname = \"b\"\nlimit_usd = 2\n", "duplicate budget `b`"),
    ];
    for (budget, want) in cases {
        let err = load_str("c.toml", &format!("{base}[[budgets]]\n{budget}")).expect_err(want).to_string();
        assert!(err.contains(want), "{budget}: {err}");
    }
    let err = load_str("c.toml", &format!("time_zone = \"Europe/Paris\"\n{base}")).expect_err("tz").to_string();
    assert!(err.contains("named zones are not supported"), "{err}");
}

#[test]
fn cursor_tab_must_name_a_fim_model() {
    let base = "[[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"http://x/v1\"\n\n[[models]]\nname = \"chat\"\nprovider = \"p\"\nupstream = \"a\"\n\n[[models]]\nname = \"fim\"\nprovider = \"p\"\nupstream = \"b\"\nfim = \"ollama\"\n";
    let ok = load_str("c.toml", &format!("{base}\n[cursor_tab]\nmodel = \"fim\"\n")).expect("a FIM model");
    assert_eq!(ok.cursor_tab.local_model(), Some("fim"));
    assert_eq!(ok.models[1].fim_dialect(), Some(crate::config::FimDialect::Ollama));
    let chat = load_str("c.toml", &format!("{base}\n[cursor_tab]\nmodel = \"chat\"\n")).expect_err("chat");
    assert!(chat.to_string().contains("is not a FIM model"), "{chat}");
    let missing = load_str("c.toml", &format!("{base}\n[cursor_tab]\nmodel = \"zz\"\n")).expect_err("unknown");
    assert!(missing.to_string().contains("no model named `zz`"), "{missing}");
    let official = load_str("c.toml", &format!("{base}\n[cursor_tab]\nmodel = \"official\"\n")).expect("official");
    assert_eq!(official.cursor_tab.local_model(), None);
    let anthropic = "[[providers]]\nname = \"a\"\nkind = \"anthropic\"\nbase_url = \"http://x/v1\"\n\n[[models]]\nname = \"f\"\nprovider = \"a\"\nupstream = \"b\"\nfim = true\n";
    let err = load_str("c.toml", anthropic).expect_err("FIM needs an openai-kind provider");
    assert!(err.to_string().contains("must be of kind"), "{err}");
}
