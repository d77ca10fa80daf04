//! Label rules and the text format of an empty and a recorded engine.

use crate::metrics::{MAX_CLIENTS, Metrics, client_label, route_of};
use crate::model::{CallFinish, CallStart, CallStatus, Usage};

#[test]
fn client_labels_are_the_user_agents_product_token() {
    assert_eq!(client_label("claude-cli/2.0.14 (external, cli)"), "claude-cli");
    assert_eq!(client_label("OpenAI/Python 1.51.0"), "openai");
    assert_eq!(client_label("codex_cli_rs/0.46.0 (Ubuntu 24.4.0; x86_64)"), "codex_cli_rs");
    assert_eq!(client_label("claude-code"), "claude-code");
    assert_eq!(client_label(""), "unknown");
    assert_eq!(client_label(&"x".repeat(100)).len(), 40);
}

#[test]
fn routes_are_named_by_dialect() {
    assert_eq!(route_of("openai_chat"), "/v1/chat/completions");
    assert_eq!(route_of("anthropic"), "/v1/messages");
    assert_eq!(route_of("openai_responses"), "/v1/responses");
    assert_eq!(route_of("cursor"), "cursor");
    assert_eq!(route_of("something new"), "other");
}

fn start(id: &str, client: &str) -> CallStart {
    CallStart {
        id: id.into(),
        started_ms: 0,
        dialect: "anthropic".into(),
        client: client.into(),
        model: "m".into(),
        model_id: Some("abc".into()),
        provider: Some("p".into()),
        upstream_model: None,
        stream: true,
        request_body: None,
        conversation_id: None,
        request_id: None,
        session_id: None,
        budget_downgrade: None,
    }
}

fn finish(id: &str) -> CallFinish {
    CallFinish {
        id: id.into(),
        finished_ms: 10,
        status: CallStatus::Ok,
        http_status: Some(200),
        usage: Usage { input_tokens: 7, output_tokens: 3, ..Usage::default() },
        usage_estimated: false,
        cost_micros: Some(1500),
        price_version: None,
        cost_source: None,
        notes: Vec::new(),
        ttft_ms: Some(5),
        total_ms: 10,
        retries: 0,
        error_kind: None,
        error_message: None,
        request_body: None,
        response_body: None,
        model_id: None,
        provider: None,
        upstream_model: None,
    }
}

#[test]
fn a_finished_call_is_counted_once_and_leaves_flight() {
    let m = Metrics::new(None).expect("metrics");
    m.call_started(&start("a", "tool/1"));
    let text = m.render().expect("render");
    assert!(text.contains("keyhaven_calls_in_flight{route=\"/v1/messages\"} 1"), "{text}");
    m.call_finished(&finish("a"));
    let text = m.render().expect("render");
    assert!(text.contains("keyhaven_calls_in_flight{route=\"/v1/messages\"} 0"), "{text}");
    assert!(
        text.contains(
            "keyhaven_requests_total{client=\"tool\",model=\"m\",provider=\"p\",route=\"/v1/messages\",status=\"ok\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("keyhaven_input_tokens_total{client=\"tool\",model=\"m\",provider=\"p\"} 7"), "{text}");
    assert!(text.contains("keyhaven_cost_usd_total{client=\"tool\",model=\"m\",provider=\"p\"} 0.0015"), "{text}");
}

#[test]
fn clients_beyond_the_cap_are_other() {
    let m = Metrics::new(None).expect("metrics");
    for i in 0..MAX_CLIENTS + 3 {
        let id = format!("c{i}");
        m.call_started(&start(&id, &format!("client{i}/1")));
        m.call_finished(&finish(&id));
    }
    let text = m.render().expect("render");
    assert!(text.contains("client=\"other\""), "{text}");
    assert!(text.contains("client=\"client0\""), "{text}");
    assert!(!text.contains(&format!("client=\"client{}\"", MAX_CLIENTS)), "{text}");
}
