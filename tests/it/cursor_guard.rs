//! The Cursor update guard (issue 15 §7) through the real proxy: a Cursor version seen for the
//! first time is self-tested in the background (its request is served normally) and tested only
//! once; a version whose self-test fails is passed through to the (test) official host, agent
//! streams included, until Retry reruns the test and, once it passes, Keyhaven serves it again.

use std::time::Duration;

use http_body_util::BodyExt;
use keyhaven::control::dto::{CursorTestStatus, CursorVersion};
use keyhaven::cursor::guard::Step;
use keyhaven::cursor::protocol::{aiserver, connect};
use prost::Message;

use crate::cursor_sim::{SHORT, Sim, sim_with};

const VERSION: &str = "3.16.2";

fn headers(version: &str) -> [(&'static str, String); 3] {
    [
        ("content-type", "application/proto".to_owned()),
        ("connect-protocol-version", "1".to_owned()),
        ("x-cursor-client-version", version.to_owned()),
    ]
}

/// A unary call as the IDE of `version` sends it: (served by the official host?, status, body).
async fn unary(s: &Sim, version: &str, path: &str, body: Vec<u8>) -> (bool, u16, bytes::Bytes) {
    let h = headers(version);
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let resp = s.send(path, &h, body).await;
    let official = resp.headers().get("x-official").is_some();
    let status = resp.status().as_u16();
    (official, status, resp.into_body().collect().await.expect("body").to_bytes())
}

async fn versions(s: &Sim) -> Vec<CursorVersion> {
    let report = s.te.handle.control().cursor_versions().await.expect("versions");
    assert!(report.available, "the proxy runs, so the guard does");
    report.versions
}

/// Waits until `version`'s self-test reaches `want`.
async fn wait_for(s: &Sim, version: &str, want: CursorTestStatus) -> CursorVersion {
    for _ in 0..600 {
        if let Some(v) = versions(s).await.into_iter().find(|v| v.version == version)
            && v.status == want
        {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("Cursor {version} never reached {want:?}: {:?}", versions(s).await);
}

fn local_names(body: &[u8]) -> Vec<String> {
    aiserver::AvailableModelsResponse::decode(body).expect("a local AvailableModels answer").model_names
}

async fn local_sim() -> Sim {
    sim_with(&format!("[proxy]\nmode = \"local\"\n{SHORT}"), "").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cursor_version_is_self_tested_once_and_passes() {
    let s = local_sim().await;
    assert!(versions(&s).await.is_empty());
    let (official, status, body) = unary(&s, VERSION, "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert_eq!((official, status), (false, 200), "the request that reveals the version is served normally");
    assert_eq!(local_names(&body), ["oa-model", "an-model", "rs-model"]);
    let v = wait_for(&s, VERSION, CursorTestStatus::Passed).await;
    assert!(v.first_seen_ms <= v.last_seen_ms && v.tested_ms.is_some_and(|t| t >= v.first_seen_ms));
    assert_eq!((v.failed_step.as_deref(), v.detail.as_deref(), v.notice.as_deref()), (None, None, None));

    // Seen again: served locally, no second test (the test time stays).
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (official, status, _) = unary(&s, VERSION, "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert_eq!((official, status), (false, 200));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = versions(&s).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].status, CursorTestStatus::Passed);
    assert_eq!(again[0].tested_ms, v.tested_ms, "the same version is not tested again");
    assert!(again[0].last_seen_ms > v.last_seen_ms, "the second sighting is recorded");
    assert_eq!(again[0].first_seen_ms, v.first_seen_ms);

    // The ledger has the row (a restart reads it back and tests nothing).
    s.te.handle.store.flush().await.expect("flush");
    let rows = s.te.handle.store.cursor_versions().await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].version.as_str(), rows[0].test_status.as_deref()), (VERSION, Some("passed")));
    assert!(s.seen.lock().expect("seen").is_empty(), "nothing went to the official host");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_self_test_passes_that_version_through_until_retry() {
    let s = local_sim().await;
    let guard = s.te.handle.cursor.as_ref().expect("cursor").guard.clone();
    guard.set_fault(Some(Step::ToolRound));
    let (official, status, _) = unary(&s, VERSION, "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert_eq!((official, status), (false, 200), "served normally while the test runs");
    let v = wait_for(&s, VERSION, CursorTestStatus::Failed).await;
    assert_eq!(v.failed_step.as_deref(), Some("tool_round"));
    assert!(v.detail.as_deref().is_some_and(|d| d.contains("read_file")), "{:?}", v.detail);
    assert_eq!(v.notice.as_deref(), Some("Cursor 3.16.2: self-test failed — using Cursor's servers"));

    // An agent stream of that version goes to the official host, its appends too.
    let open =
        connect::encode_envelope(&aiserver::BidiRequestId { request_id: "req-guarded".into() }.encode_to_vec(), false);
    let h = headers(VERSION);
    let mut h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    h[0] = ("content-type", "application/connect+proto");
    let resp = s.send("/agent.v1.AgentService/RunSSE", &h, open.to_vec()).await;
    assert_eq!(
        resp.headers().get("x-official").and_then(|v| v.to_str().ok()),
        Some("/agent.v1.AgentService/RunSSE"),
        "the run stream is passed through"
    );
    let echoed = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(echoed, open, "the official host got the IDE's bytes unchanged");
    let append = connect::encode_append("req-guarded", 0, b"\x0a\x00");
    let (official, status, _) = unary(&s, VERSION, "/aiserver.v1.BidiService/BidiAppend", append).await;
    assert_eq!((official, status), (true, 200), "the stream's append is passed through");
    let (official, _, _) = unary(&s, VERSION, "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert!(official, "the model list comes from Cursor's servers too");
    // Another version is not affected.
    let (official, status, _) = unary(&s, "3.15.0", "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert_eq!((official, status), (false, 200));
    assert!(s.te.handle.cursor.as_ref().expect("cursor").backend.registry().get("req-guarded").is_none());
    let paths: Vec<String> = s.seen.lock().expect("seen").iter().map(|x| x.path.clone()).collect();
    assert_eq!(
        paths,
        [
            "/agent.v1.AgentService/RunSSE",
            "/aiserver.v1.BidiService/BidiAppend",
            "/aiserver.v1.AiService/AvailableModels"
        ]
    );

    // The dashboard's view over the control API.
    let (status, body) = s.te.control(reqwest::Method::GET, "/api/cursor/versions", None).await;
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("json");
    let row = listed["versions"].as_array().expect("versions").iter().find(|v| v["version"] == VERSION).cloned();
    let row = row.expect("listed");
    assert_eq!((row["status"].as_str(), row["failedStep"].as_str()), (Some("failed"), Some("tool_round")));
    assert!(
        row["firstSeenMs"].as_i64().is_some()
            && row["lastSeenMs"].as_i64().is_some()
            && row["testedMs"].as_i64().is_some()
    );

    // Retry (the dashboard's button) while still broken: fails again, still passed through.
    let (status, body) =
        s.te.control(reqwest::Method::POST, &format!("/api/cursor/versions/{VERSION}/retry"), None).await;
    assert_eq!(status, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).expect("json");
    let now = report["versions"].as_array().expect("versions").iter().find(|v| v["version"] == VERSION).cloned();
    assert_eq!(now.expect("listed")["status"], "running");
    wait_for(&s, VERSION, CursorTestStatus::Failed).await;
    let (official, _, _) = unary(&s, VERSION, "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert!(official);

    // Fixed: Retry brings it back to Keyhaven.
    guard.set_fault(None);
    s.te.handle.control().retry_cursor_version(VERSION).await.expect("retry");
    let v = wait_for(&s, VERSION, CursorTestStatus::Passed).await;
    assert_eq!((v.failed_step, v.notice), (None, None));
    let (official, status, body) = unary(&s, VERSION, "/aiserver.v1.AiService/AvailableModels", Vec::new()).await;
    assert_eq!((official, status), (false, 200));
    assert_eq!(local_names(&body), ["oa-model", "an-model", "rs-model"]);
    let (status, body) = s.te.control(reqwest::Method::POST, "/api/cursor/versions/0.0.1/retry", None).await;
    assert_eq!(status, 404, "a version never seen: {body}");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_self_test_step_catches_its_own_fault() {
    let s = local_sim().await;
    let guard = s.te.handle.cursor.as_ref().expect("cursor").guard.clone();
    for (i, step) in [Step::ModelList, Step::TextTurn].into_iter().enumerate() {
        guard.set_fault(Some(step));
        let version = format!("9.{i}.0");
        unary(&s, &version, "/aiserver.v1.AiService/ServerTime", Vec::new()).await;
        let v = wait_for(&s, &version, CursorTestStatus::Failed).await;
        assert_eq!(v.failed_step.as_deref(), Some(step.as_str()), "{:?}", v.detail);
    }
    s.te.stop().await;
}
