//! Cursor Tab through the intercepting proxy and the local CA, as the IDE's extension host sends
//! it: `AiService/StreamCpp` with one (optionally gzip) request envelope over HTTP/1.1 or HTTP/2,
//! answered with the user's FIM model. Requests are encoded and responses decoded with the
//! hand-written description in `support::tab_wire`, never the engine's generated types. The
//! scripted FIM upstream checks the exact prompt, suffix, stop sequences and `max_tokens`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame as BodyFrame;
use keyhaven::model::CallStatus;
use keyhaven::secrets::MemoryKeyring;
use serde_json::json;

use crate::cursor_sim::{ReqBody, Sim, TIMEOUT, sim_with};
use crate::fim::fim_models;
use crate::support::mock::Reply;
use crate::support::tab_wire::{CppFrame, Frame, envelope, error_kind, frames, stream_cpp_request};
use crate::support::{TestEngine, config_text};

const STREAM_CPP: &str = "/aiserver.v1.AiService/StreamCpp";

/// The IDE's headers on StreamCpp (docs/cursor-tab.md §1.4).
fn headers(request_id: &'static str, gzip: bool) -> Vec<(&'static str, &'static str)> {
    let mut h = vec![
        ("content-type", "application/connect+proto"),
        ("connect-protocol-version", "1"),
        ("connect-accept-encoding", "gzip"),
        ("authorization", "Bearer sim-cursor-access-token"),
        ("x-cursor-client-version", "2.6.19"),
        ("x-cursor-client-type", "ide"),
        ("x-ghost-mode", "true"),
        ("x-request-id", request_id),
    ];
    if gzip {
        h.push(("connect-content-encoding", "gzip"));
    }
    h
}

async fn tab_sim(model: &str) -> Sim {
    let tables = format!("[proxy]\nmode = \"local\"\n{}\n[cursor_tab]\nmodel = \"{model}\"\n", fim_models("{MOCK}"));
    sim_with(&tables, "").await
}

/// A text completion in the OpenAI-compatible completions dialect.
fn completion_sse(text: &str) -> String {
    let chunk = json!({"id": "c", "object": "text_completion", "choices": [{"text": text, "index": 0, "finish_reason": "stop"}]});
    let usage = json!({"id": "c", "object": "text_completion", "choices": [],
                       "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44}});
    format!("data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n")
}

fn msg(f: CppFrame) -> Frame {
    Frame::Message(f)
}

/// The frames of a suggestion replacing 1-based line `line` with `text`.
fn suggestion(line: u64, text: &str) -> Vec<Frame> {
    vec![
        msg(CppFrame { model_info: Some((false, false)), ..CppFrame::default() }),
        msg(CppFrame { range: Some((line, line)), ..CppFrame::default() }),
        msg(CppFrame { text: Some(text.into()), ..CppFrame::default() }),
        msg(CppFrame { done_stream: Some(true), ..CppFrame::default() }),
        Frame::End(json!({})),
    ]
}

async fn h1_tab(sim: &Sim, request_id: &'static str, body: Vec<u8>, gzip: bool) -> Vec<Frame> {
    let resp = sim.send(STREAM_CPP, &headers(request_id, gzip), body).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/connect+proto");
    let bytes = tokio::time::timeout(TIMEOUT, resp.into_body().collect()).await.expect("in time").expect("body");
    frames(&bytes.to_bytes())
}

fn h2_body(bytes: Vec<u8>) -> ReqBody {
    let stream = futures::stream::once(async move { Ok::<_, Infallible>(BodyFrame::data(Bytes::from(bytes))) });
    StreamBody::new(Box::pin(stream))
}

fn h2_request(request_id: &'static str, body: Vec<u8>) -> Request<ReqBody> {
    let mut req = Request::post(format!("https://api2.cursor.sh{STREAM_CPP}"));
    for (k, v) in headers(request_id, false) {
        req = req.header(k, v);
    }
    req.body(h2_body(body)).expect("request")
}

/// `fn add` with the cursor after `a +` on line 1 (0-based), column 7.
const ADD_RS: &str = "fn add(a: i32, b: i32) -> i32 {\n    a +\n}\n";

#[tokio::test]
async fn single_line_suggestion_over_http1() {
    let sim = tab_sim("ds-fim").await;
    sim.mock.push(Reply::sse(&completion_sse(" b")));
    let body = envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false);
    let got = h1_tab(&sim, "tab-1", body, false).await;
    assert_eq!(got, suggestion(2, "    a + b"));
    let seen = sim.mock.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/beta/completions");
    assert_eq!(
        seen[0].body,
        json!({
            "model": "deepseek-chat",
            "prompt": "// Path: src/lib.rs\nfn add(a: i32, b: i32) -> i32 {\n    a +",
            "suffix": "\n}\n",
            "max_tokens": 64,
            "stop": ["\n"],
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    let row = sim.te.only_call().await.summary;
    assert_eq!((row.client.as_str(), row.dialect.as_str()), ("cursor-tab", "fim_completions"));
    assert_eq!(row.request_id.as_deref(), Some("tab-1"));
    assert_eq!(row.status, CallStatus::Ok);
    assert!(sim.seen.lock().expect("seen").iter().all(|s| s.path != STREAM_CPP), "StreamCpp stayed local");
}

#[tokio::test]
async fn multi_line_suggestion_over_http2_with_codestral_and_gzip() {
    let sim = tab_sim("codestral").await;
    let chunk = |c: &str| {
        let v = json!({"id": "x", "object": "chat.completion.chunk", "model": "codestral-latest",
                       "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": null}]});
        format!("data: {v}\n\n")
    };
    sim.mock.push(Reply::sse(&format!(
        "{}{}{}data: [DONE]\n\n",
        chunk("y = x * 2\n"),
        chunk("    return y\n"),
        chunk("print(f(1))\n")
    )));
    let file = "def f(x):\n    \nprint(f(1))\n";
    let mut h2 = sim.h2().await;
    let req = h2_request("tab-2", envelope(&stream_cpp_request("a.py", file, 1, 4, "line_change", false), false));
    let resp = tokio::time::timeout(TIMEOUT, h2.send_request(req)).await.expect("in time").expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    // The repeated following line is dropped; the replacement has more lines than the range.
    assert_eq!(frames(&bytes), suggestion(2, "    y = x * 2\n    return y"));
    assert_eq!(
        sim.mock.seen()[0].body,
        json!({
            "model": "codestral-latest",
            "prompt": "# Path: a.py\ndef f(x):\n    ",
            "suffix": "\nprint(f(1))\n",
            "max_tokens": 256,
            "stop": ["\n\n"],
            "temperature": 0.0,
            "stream": true
        })
    );
    assert_eq!(sim.mock.seen()[0].path, "/v1/fim/completions");

    // The same request as a gzip envelope (flag 0x01, `connect-content-encoding: gzip`), HTTP/1.1.
    sim.mock.push(Reply::sse(&format!("{}data: [DONE]\n\n", chunk("return x"))));
    let body = envelope(&stream_cpp_request("a.py", file, 1, 4, "line_change", false), true);
    assert_eq!(h1_tab(&sim, "tab-3", body, true).await, suggestion(2, "    return x"));
    assert_eq!(sim.mock.seen()[1].body["prompt"], "# Path: a.py\ndef f(x):\n    ");
}

#[tokio::test]
async fn file_sync_request_gets_file_not_found_then_the_full_buffer_is_served() {
    let sim = tab_sim("ds-fim").await;
    let body = envelope(&stream_cpp_request("src/lib.rs", "", 1, 7, "typing", true), false);
    let got = h1_tab(&sim, "tab-fs", body, false).await;
    let [Frame::End(end)] = &got[..] else { panic!("one end-stream frame: {got:?}") };
    assert_eq!(end["error"]["code"], "not_found");
    assert_eq!(error_kind(end), Some(33), "ERROR_FILE_NOT_FOUND makes the client re-send the buffer");
    assert!(sim.mock.seen().is_empty(), "no provider call for a file Keyhaven does not have");
    // The client's retry with the contents.
    sim.mock.push(Reply::sse(&completion_sse(" b")));
    let body = envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false);
    assert_eq!(h1_tab(&sim, "tab-fs", body, false).await, suggestion(2, "    a + b"));
}

#[tokio::test]
async fn a_newer_request_cancels_the_older_provider_call_at_once() {
    let sim = tab_sim("ds-fim").await;
    let partial =
        json!({"id": "c", "object": "text_completion", "choices": [{"text": " b", "index": 0, "finish_reason": null}]});
    sim.mock.push(Reply::sse(&format!("data: {partial}\n\n")).hang());
    sim.mock.push(Reply::sse(&completion_sse(" c")));
    let mut h2 = sim.h2().await;
    let first =
        h2_request("tab-old", envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false));
    let first = tokio::time::timeout(TIMEOUT, h2.send_request(first)).await.expect("in time").expect("response");
    for _ in 0..400 {
        if !sim.mock.seen().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(sim.mock.seen().len(), 1, "the first provider call is in flight");
    let second =
        h2_request("tab-new", envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false));
    let second = tokio::time::timeout(TIMEOUT, h2.send_request(second)).await.expect("in time").expect("response");
    let new = frames(&second.into_body().collect().await.expect("body").to_bytes());
    assert_eq!(new, suggestion(2, "    a + c"));
    let old = frames(&first.into_body().collect().await.expect("body").to_bytes());
    let [Frame::End(end)] = &old[..] else { panic!("the superseded stream ends with an error only: {old:?}") };
    assert_eq!(end["error"]["code"], "canceled");
    for _ in 0..400 {
        if !sim.mock.dropped_at().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dropped = *sim.mock.dropped_at().first().expect("the upstream saw the first call dropped");
    let newer = sim.mock.seen()[1].at;
    assert!(
        dropped.saturating_duration_since(newer) < Duration::from_millis(50),
        "dropped {:?} after the newer call arrived",
        dropped.saturating_duration_since(newer)
    );
    let rows = sim.te.wait_calls(2).await;
    let status =
        |rid: &str| rows.iter().find(|r| r.summary.request_id.as_deref() == Some(rid)).expect("row").summary.status;
    assert_eq!(status("tab-old"), CallStatus::Canceled);
    assert_eq!(status("tab-new"), CallStatus::Ok);
}

#[tokio::test]
async fn provider_error_ends_the_stream_with_a_connect_error_and_no_suggestion() {
    let sim = tab_sim("ds-fim").await;
    sim.mock.push(Reply::json(500, r#"{"error":{"message":"model overloaded","type":"server_error"}}"#));
    let body = envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false);
    let got = h1_tab(&sim, "tab-err", body, false).await;
    let [Frame::End(end)] = &got[..] else { panic!("an error end-stream only: {got:?}") };
    assert_eq!(end["error"]["code"], "unavailable");
    assert_eq!(error_kind(end), Some(57), "ERROR_PROVIDER_ERROR");
    assert!(end["error"]["message"].as_str().expect("message").contains("model overloaded"));
    let row = sim.te.only_call().await.summary;
    assert_eq!((row.status, row.http_status), (CallStatus::Error, Some(500)));
}

#[tokio::test]
async fn helper_calls_are_neutral_while_tab_is_local_and_config_passes_through() {
    let sim = tab_sim("ds-fim").await;
    // CppConfig and the Tab model list always come from Cursor (echoed by the test host).
    for path in ["/aiserver.v1.AiService/CppConfig", "/aiserver.v1.CppService/AvailableModels"] {
        let resp = sim.send(path, &[("content-type", "application/proto")], vec![0x10, 0x01]).await;
        assert_eq!(resp.headers().get("x-official").map(|v| v.to_str().expect("ascii")), Some(path));
    }
    let (status, body) = sim.unary("/aiserver.v1.AiService/RefreshTabContext", vec![0x0a, 0x00]).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 0), "RefreshTabContextResponse{{}}");
    let (status, body) = sim.unary("/aiserver.v1.AiService/GetCppEditClassification", vec![]).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &[0x18, 0x00][..]), "should_noop (3) = false");
    let resp =
        sim.send("/aiserver.v1.AiService/StreamNextCursorPrediction", &headers("p", false), envelope(&[], false)).await;
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&bytes[..7], &[0, 0, 0, 0, 2, 0x18, 0x01], "is_not_in_range (3) = true");
    assert_eq!(frames(&bytes[7..]), vec![Frame::End(json!({}))]);
    let official: Vec<String> = sim.seen.lock().expect("seen").iter().map(|s| s.path.clone()).collect();
    assert!(
        !official
            .iter()
            .any(|p| p.contains("RefreshTabContext") || p.contains("Classification") || p.contains("Prediction")),
        "{official:?}"
    );
}

#[tokio::test]
async fn official_tab_passes_everything_through() {
    let sim = sim_with(&format!("[proxy]\nmode = \"local\"\n{}", fim_models("{MOCK}")), "").await;
    let body = envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false);
    let resp = sim.send(STREAM_CPP, &headers("tab-off", false), body.clone()).await;
    assert_eq!(resp.headers().get("x-official").map(|v| v.to_str().expect("ascii")), Some(STREAM_CPP));
    let seen = sim.seen.lock().expect("seen").clone();
    let sent = seen.iter().find(|s| s.path == STREAM_CPP).expect("forwarded");
    assert_eq!(sent.body.as_ref(), &body[..], "forwarded byte for byte");
    assert_eq!(sent.headers["authorization"], "Bearer sim-cursor-access-token", "with the user's own headers");
    let resp = sim.unary("/aiserver.v1.AiService/RefreshTabContext", vec![0x0a, 0x00]).await;
    assert_eq!(resp.1.as_ref(), &[0x0a, 0x00], "echoed by the official host");
    assert!(sim.mock.seen().is_empty(), "no FIM call");
}

#[tokio::test]
async fn control_api_switches_tab_between_official_and_a_fim_model() {
    let mock = crate::support::MockUpstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_text(&mock.url(), "") + &fim_models(&mock.url());
    let te = TestEngine::start_full(dir, &config, Arc::new(MemoryKeyring::default()), true, Default::default()).await;
    let (status, body) = te.control(reqwest::Method::GET, "/api/routing", None).await;
    assert_eq!(status, 200);
    let r: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(r["tab"], json!({"model": null, "fimModels": ["ds-fim", "codestral", "qwen-fim"]}));
    let (status, body) = te.control(reqwest::Method::PUT, "/api/routing/tab", Some(json!({"model": "ds-fim"}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).expect("json")["tab"]["model"], "ds-fim");
    assert_eq!(te.handle.gateway.catalog().tab_route().expect("live").model.name, "ds-fim");
    let file = std::fs::read_to_string(te.dir.path().join("config.toml")).expect("config");
    assert!(file.contains("[cursor_tab]") && file.contains("model = \"ds-fim\""), "{file}");
    let (status, body) = te.control(reqwest::Method::PUT, "/api/routing/tab", Some(json!({"model": "oa-model"}))).await;
    assert_eq!(status, 400, "a chat model cannot serve Tab: {body}");
    let (status, _) = te.control(reqwest::Method::PUT, "/api/routing/tab", Some(json!({"model": null}))).await;
    assert_eq!(status, 200);
    assert!(te.handle.gateway.catalog().tab_route().is_none(), "back to Cursor's Tab");
}

/// Waits until the FIM mock saw `n` response bodies dropped before their end.
async fn dropped(sim: &Sim, n: usize) -> bool {
    for _ in 0..400 {
        if sim.mock.dropped_at().len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

#[tokio::test]
async fn a_client_that_goes_away_drops_the_provider_call() {
    let sim = tab_sim("ds-fim").await;
    let partial =
        json!({"id": "c", "object": "text_completion", "choices": [{"text": " b", "index": 0, "finish_reason": null}]});
    sim.mock.push(Reply::sse(&format!("data: {partial}\n\n")).hang());
    let body = envelope(&stream_cpp_request("src/lib.rs", ADD_RS, 1, 7, "typing", false), false);
    // HTTP/2: the client resets the stream.
    let mut h2 = sim.h2().await;
    let resp = tokio::time::timeout(TIMEOUT, h2.send_request(h2_request("tab-gone-h2", body.clone())))
        .await
        .expect("in time")
        .expect("response");
    for _ in 0..400 {
        if !sim.mock.seen().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(resp);
    assert!(dropped(&sim, 1).await, "the provider call ended with the HTTP/2 stream");
    // HTTP/1.1: the client closes its connection.
    let resp = sim.send(STREAM_CPP, &headers("tab-gone-h1", false), body).await;
    for _ in 0..400 {
        if sim.mock.seen().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(resp);
    assert!(dropped(&sim, 2).await, "the provider call ended with the HTTP/1.1 connection");
    let rows = sim.te.wait_calls(2).await;
    assert!(rows.iter().all(|r| r.summary.status == CallStatus::Canceled), "both recorded as canceled");
}

#[test]
fn the_tab_hosts_are_on_the_default_intercept_list() {
    let list = keyhaven::proxy::InterceptList::new(&keyhaven::config::ProxyConfig::default().intercept);
    for host in ["api4.cursor.sh", "us.gcpp.cursor.sh", "us-only.gcpp.cursor.sh", "api3.cursor.sh", "api2.cursor.sh"] {
        assert!(list.matches(host), "{host}");
    }
}
