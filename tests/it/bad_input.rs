//! Bad input on every route: each gets a clear error in the caller's dialect with the right
//! status, never a panic, and calls already recorded stay recorded.

use serde_json::{Value, json};

use crate::support::fixtures::{Case, request, upstream_sse};
use crate::support::{Client, MockUpstream, Reply, TestEngine, Up};

async fn send_raw(engine: &TestEngine, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    let resp =
        engine.http.post(engine.url(path)).header("content-type", content_type).body(body).send().await.expect("send");
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

/// Asserts the error body has the dialect's shape and returns its message.
fn error_message(path: &str, body: &Value) -> String {
    if path == "/v1/messages" {
        assert_eq!(body["type"], json!("error"), "anthropic error shape: {body}");
        assert!(body["error"]["type"].is_string(), "{body}");
        body["error"]["message"].as_str().expect("message").to_owned()
    } else {
        assert!(body["error"]["type"].is_string(), "openai error shape: {body}");
        body["error"]["message"].as_str().expect("message").to_owned()
    }
}

#[tokio::test]
async fn malformed_and_mistyped_requests_get_dialect_errors() {
    let mock = MockUpstream::start().await;
    mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let engine = TestEngine::start(&mock).await;
    // One good call first: bad input after it must not disturb its record.
    let ok = engine.post(Client::Openai, &request(Client::Openai, "oa-model", false, Case::Text)).await;
    assert_eq!(ok.status(), 200);
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let cases: Vec<(Vec<u8>, u16, &str)> = vec![
            (b"{not json".to_vec(), 400, "malformed JSON"),
            (b"".to_vec(), 400, "malformed JSON"),
            (
                br#"{"model": "oa-model", "messages": [{"role": "user", "content": "hi"}]"#.to_vec(),
                400,
                "malformed JSON",
            ),
            (br#"{"model": 5, "messages": []}"#.to_vec(), 400, "model"),
            (br#"{"model": "oa-model", "messages": "hi"}"#.to_vec(), 400, "messages"),
            (br#"{"model": "oa-model", "messages": [{"role": "wizard", "content": "x"}]}"#.to_vec(), 400, "role"),
            (br#"[1, 2, 3]"#.to_vec(), 400, ""),
            (b"\xff\xfe\x00garbage".to_vec(), 400, ""),
        ];
        for (body, status, needle) in cases {
            let (got, err) = send_raw(&engine, path, "application/json", body.clone()).await;
            assert_eq!(got, status, "{path} {:?}: {err}", String::from_utf8_lossy(&body));
            let msg = error_message(path, &err);
            assert!(msg.contains(needle), "{path}: `{msg}` should mention `{needle}`");
        }
        // Unknown model: 404 in the dialect, and the call is still recorded.
        let body = serde_json::to_vec(
            &json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}),
        )
        .expect("json");
        let (got, err) = send_raw(&engine, path, "application/json", body).await;
        assert_eq!(got, 404, "{err}");
        assert!(error_message(path, &err).contains("unknown model `nope`"));
    }
    let calls = engine.wait_calls(3).await;
    assert_eq!(calls.iter().filter(|c| c.summary.status == keyhaven::model::CallStatus::Ok).count(), 1);
    assert_eq!(calls.iter().filter(|c| c.summary.error_kind.as_deref() == Some("unknown_model")).count(), 2);
    engine.stop().await;
}

#[tokio::test]
async fn oversized_bodies_get_413_in_the_dialect() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start_with(&mock, "max_request_bytes = 1024").await;
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let big = json!({"model": "oa-model", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
        let (status, err) = send_raw(&engine, path, "application/json", serde_json::to_vec(&big).expect("json")).await;
        assert_eq!(status, 413, "{err}");
        assert!(error_message(path, &err).contains("exceeds 1024 bytes"));
    }
    assert!(mock.seen().is_empty(), "nothing reached the upstream");
    engine.stop().await;
}

#[tokio::test]
async fn local_endpoint_guard_refuses_foreign_pages() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let port = engine.base.rsplit(':').next().expect("port").to_owned();
    let body = serde_json::to_vec(&request(Client::Openai, "oa-model", false, Case::Text)).expect("json");
    let cases: Vec<(Vec<(&str, String)>, u16)> = vec![
        (vec![("host", format!("evil.example:{port}"))], 403),
        (vec![("host", format!("127.0.0.1.nip.io:{port}"))], 403),
        (vec![("host", format!("0.0.0.0:{port}"))], 403),
        (vec![("origin", "http://evil.example".into())], 403),
        (vec![("origin", "null".into())], 403),
        (vec![("origin", format!("http://localhost.evil.com:{port}"))], 403),
        (vec![("content-type", "text/plain".into())], 415),
        (vec![("content-type", "application/x-www-form-urlencoded".into())], 415),
    ];
    for (headers, status) in cases {
        let mut req = engine.http.post(engine.url("/v1/chat/completions")).body(body.clone());
        let mut has_ct = false;
        for (k, v) in &headers {
            has_ct |= *k == "content-type";
            req = req.header(*k, v);
        }
        if !has_ct {
            req = req.header("content-type", "application/json");
        }
        let resp = req.send().await.expect("send");
        assert_eq!(resp.status().as_u16(), status, "{headers:?}");
        assert!(resp.headers().contains_key("x-keyhaven-overhead-ms"), "every response carries the overhead header");
        assert!(resp.headers().get("access-control-allow-origin").is_none(), "no CORS, ever");
    }
    assert!(mock.seen().is_empty(), "no request got through the guard");
    engine.stop().await;
}

#[tokio::test]
async fn unknown_routes_are_404_in_openai_shape() {
    let mock = MockUpstream::start().await;
    let engine = TestEngine::start(&mock).await;
    let resp = engine.http.get(engine.url("/v2/nothing")).send().await.expect("send");
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.expect("json");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("/v2/nothing")));
    engine.stop().await;
}
