//! Unit tests of the Lingma provider's pure parts: info file, framing, prompt, mapping, and the
//! byte-stream connection over an in-memory pipe.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use crate::config::{LingmaOptions, LingmaTransport, SessionMode};
use crate::model::{ImageSource, Message, Part, Request, Role};
use crate::provider::lingma::{
    Conn, Endpoint, Incoming, build, classify, encode_frame, model_id, parse_info, parse_model_table, percent_encode,
    resolve, resolve_mode, take_frame,
};

fn opts(mode: SessionMode) -> Arc<LingmaOptions> {
    Arc::new(LingmaOptions {
        info_file: None,
        transport: LingmaTransport::Websocket,
        ws_url: None,
        pipe: None,
        session_mode: mode,
        queue: 0,
        model_map: BTreeMap::from([("my-model".to_owned(), "mine1".to_owned())]),
        timeout: 1000,
        cwd: None,
        temp_dir: None,
    })
}

fn req(messages: Vec<Message>) -> Request {
    Request { model: "m".into(), messages, ..Request::default() }
}

#[test]
fn info_file_json_and_legacy_forms() {
    let info = parse_info(r#"{"websocketPort": 36510, "pid": 42, "ipcServerPath": "lingma-abc"}"#).expect("json");
    assert_eq!(info.websocket_port, Some(36510));
    assert_eq!(info.pid, Some(42));
    assert_eq!(info.ipc_server_path.as_deref(), Some("lingma-abc"));
    let legacy = parse_info("36511\n99\n").expect("legacy");
    assert_eq!(legacy.websocket_port, Some(36511));
    assert!(parse_info("").is_err());
    assert!(parse_info(r#"{"pid": 1}"#).is_err());
}

#[test]
fn endpoint_from_the_info_file_is_reread_each_time() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join(".info.json");
    std::fs::write(&file, r#"{"websocketPort": 4001}"#).expect("write");
    let mut o = (*opts(SessionMode::Auto)).clone();
    o.info_file = Some(file.clone());
    assert_eq!(resolve(&o).expect("resolves"), Endpoint::WebSocket("ws://127.0.0.1:4001/".into()));
    std::fs::write(&file, r#"{"websocketPort": 4002}"#).expect("write");
    assert_eq!(resolve(&o).expect("resolves"), Endpoint::WebSocket("ws://127.0.0.1:4002/".into()));
    o.info_file = None;
    assert!(resolve(&o).expect_err("no file").contains("info_file"));
}

#[test]
fn an_explicit_pipe_name_becomes_a_pipe_path() {
    let mut o = (*opts(SessionMode::Auto)).clone();
    o.transport = LingmaTransport::Pipe;
    o.pipe = Some("lingma-x".into());
    assert_eq!(resolve(&o).expect("resolves"), Endpoint::Pipe(r"\\.\pipe\lingma-x".into()));
}

#[test]
fn frames_split_and_join() {
    let mut buf = encode_frame(br#"{"a":1}"#);
    buf.extend_from_slice(&encode_frame(br#"{"b":2}"#)[..10]);
    assert_eq!(take_frame(&mut buf).expect("ok").as_deref(), Some(&br#"{"a":1}"#[..]));
    assert_eq!(take_frame(&mut buf).expect("ok"), None);
    let mut bad = b"X-Other: 1\r\n\r\n{}".to_vec();
    assert!(take_frame(&mut bad).is_err());
}

#[tokio::test]
async fn a_byte_stream_connection_carries_frames_both_ways() {
    let (a, b) = tokio::io::duplex(64);
    let mut left = Conn::from_bytes(a, Endpoint::Pipe("test".into()));
    let mut right = Conn::from_bytes(b, Endpoint::Pipe("test".into()));
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"text": "é".repeat(100)}});
    let (sent, got) = tokio::join!(left.send(&msg), right.recv());
    sent.expect("sent");
    assert_eq!(got.expect("received"), msg);
}

#[test]
fn model_ids_map_through_config_then_table() {
    let table = parse_model_table("# c\nA-b = ab # x\n\n bad line\n");
    assert_eq!(table.get("a-b").map(String::as_str), Some("ab"));
    let extra = BTreeMap::from([("kimi-k2.6".to_owned(), "override".to_owned())]);
    assert_eq!(model_id("kimi-k2.6", &BTreeMap::new()), "kimi2.6");
    assert_eq!(model_id("Qwen3-Max", &BTreeMap::new()), "qwen3max");
    assert_eq!(model_id("kimi-k2.6", &extra), "override");
    assert_eq!(model_id("unknown", &extra), "unknown");
}

#[test]
fn auto_mode_reuses_single_turns_only() {
    let single = req(vec![Message::text(Role::User, "hi")]);
    let system = req(vec![Message::text(Role::System, "be brief"), Message::text(Role::User, "hi")]);
    let history = req(vec![
        Message::text(Role::User, "hi"),
        Message::text(Role::Assistant, "hello"),
        Message::text(Role::User, "again"),
    ]);
    assert_eq!(resolve_mode(SessionMode::Auto, &single), SessionMode::Reuse);
    assert_eq!(resolve_mode(SessionMode::Auto, &system), SessionMode::Fresh);
    assert_eq!(resolve_mode(SessionMode::Auto, &history), SessionMode::Fresh);
    assert_eq!(resolve_mode(SessionMode::Fresh, &single), SessionMode::Fresh);
    assert_eq!(resolve_mode(SessionMode::Reuse, &history), SessionMode::Reuse);
}

#[test]
fn prompts_carry_the_transcript_or_the_latest_message() {
    let image = ImageSource::Base64 { media_type: "image/png".into(), data: "aGk=".into() };
    let r = req(vec![
        Message::text(Role::System, "be brief"),
        Message::text(Role::User, "first"),
        Message::text(Role::Assistant, "answer"),
        Message {
            role: Role::User,
            content: vec![Part::text("look"), Part::Image { source: image.clone(), cache: None }],
        },
    ]);
    let p = build("lg", &opts(SessionMode::Auto), "my-model", &r).expect("builds");
    assert_eq!(p.mode, SessionMode::Fresh);
    assert_eq!(p.model, "mine1");
    assert_eq!(p.images, vec![image]);
    let text = p.text(true);
    for needle in ["System instructions:\nbe brief", "User: first", "Assistant: answer", "User: look"] {
        assert!(text.contains(needle), "{needle} missing in {text}");
    }
    let p = build("lg", &opts(SessionMode::Reuse), "x", &r).expect("builds");
    assert_eq!(p.text(false), "look");
    assert!(p.text(true).starts_with("System instructions:\nbe brief"));
    assert!(build("lg", &opts(SessionMode::Auto), "x", &req(vec![Message::text(Role::Assistant, "a")])).is_err());
}

#[test]
fn updates_are_classified_by_request_id() {
    let chunk = |rid: &str| {
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"_meta": {"ai-coding/request-id": rid},
            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}})
    };
    assert_eq!(classify(&chunk("r1"), "r1", 5), Incoming::Text("hi".into()));
    assert_eq!(classify(&chunk("r0"), "r1", 5), Incoming::Other);
    let finish = json!({"method": "session/update", "params": {"_meta": {"ai-coding/request-id": "r1"},
        "update": {"sessionUpdate": "notification", "type": "chat_finish", "data": {"reason": "stop"}}}});
    assert_eq!(classify(&finish, "r1", 5), Incoming::Finish);
    let failed = json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "no"}});
    assert_eq!(classify(&failed, "r1", 5), Incoming::Failed("no".into()));
    assert_eq!(classify(&failed, "r1", 6), Incoming::Other);
}

#[test]
fn paths_are_percent_encoded() {
    assert_eq!(percent_encode("/tmp/a b/x.png"), "%2Ftmp%2Fa%20b%2Fx.png");
}
