//! `GET /api/doctor` (the checks `keyhaven doctor` prints) against a real engine: a provider whose
//! upstream refuses the key fails with "enter the key again", an unreachable one with "check the
//! base URL", a provider without a model warns, the keyring probe passes, and the report's `ok`
//! follows the failures.

use serde_json::Value;

use crate::support::{MockUpstream, Reply, TestEngine, config_text};

fn find<'a>(report: &'a Value, title: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["title"] == title)
        .unwrap_or_else(|| panic!("no check titled {title:?} in {report:#}"))
}

#[tokio::test]
async fn doctor_names_each_failure_and_what_to_do() {
    let mock = MockUpstream::start().await;
    // Every provider of the test config points at the mock, which refuses the key.
    mock.push(Reply::json(401, r#"{"error":{"message":"invalid x-api-key","type":"authentication_error"}}"#));
    // A provider nobody listens for (port 9, discard, is closed on loopback), and one with no model.
    let extra_tables = r#"
[[providers]]
name = "gone"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
key = "keyring:gone-key"

[[models]]
name = "gone-model"
provider = "gone"
upstream = "x"

[[providers]]
name = "lonely"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
key = "keyring:gone-key"
"#;
    let config = format!("{}{extra_tables}", config_text(&mock.url(), ""));
    // A key goes only to the origin it was stored for: the unreachable provider has its own.
    let keyring = std::sync::Arc::new(keyhaven::secrets::MemoryKeyring::default());
    keyhaven::secrets::Keyring::set(keyring.as_ref(), "gone-key", &secrecy::SecretString::from("sk-gone-0123"))
        .expect("key");
    let engine = TestEngine::start_with_keyring(tempfile::tempdir().expect("tempdir"), &config, keyring).await;

    let (status, body) = engine.control(reqwest::Method::GET, "/api/doctor", None).await;
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).expect("json");

    assert_eq!(report["ok"], false, "{report:#}");
    let keyring = find(&report, "The OS keyring stores and returns keys");
    assert_eq!(keyring["status"], "ok", "{keyring:#}");
    assert_eq!(find(&report, "The gateway listens")["status"], "ok");

    for name in ["oa", "an", "rs"] {
        let c = find(&report, &format!("Provider {name} answers with its key"));
        assert_eq!(c["status"], "fail", "{c:#}");
        let fix = c["fix"].as_str().expect("a fix");
        assert!(fix.contains("Enter the key again") && fix.contains(name), "{fix}");
    }
    let gone = find(&report, "Provider gone answers with its key");
    assert_eq!(gone["status"], "fail", "{gone:#}");
    assert!(gone["fix"].as_str().expect("fix").contains("base URL"), "{gone:#}");
    let lonely = find(&report, "Provider lonely answers with its key");
    assert_eq!(lonely["status"], "warn", "{lonely:#}");
    assert!(lonely["fix"].as_str().expect("fix").contains("add a model"), "{lonely:#}");

    // The canary key the providers use never appears in the report.
    assert!(!body.contains(crate::support::CANARY_KEY));
    engine.stop().await;
}

#[tokio::test]
async fn doctor_is_ok_when_every_provider_answers() {
    let mock = MockUpstream::start().await;
    let config = r#"
[server]
listen = "127.0.0.1:0"

[[providers]]
name = "oa"
kind = "openai"
base_url = "MOCK/v1"
key = "keyring:test-key"

[[models]]
name = "oa-model"
provider = "oa"
upstream = "gpt-4o-mini"
"#
    .replace("MOCK", &mock.url());
    // A Chat Completions stream as OpenAI sends it, written by hand.
    mock.push(Reply::sse(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\
         \"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"p\"},\"finish_reason\":null}]}\n\n\
         data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\
         \"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
         data: [DONE]\n\n",
    ));
    let engine = TestEngine::start_in(tempfile::tempdir().expect("tempdir"), &config).await;
    let (status, body) = engine.control(reqwest::Method::GET, "/api/doctor", None).await;
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(find(&report, "Provider oa answers with its key")["status"], "ok", "{report:#}");
    engine.stop().await;
}
