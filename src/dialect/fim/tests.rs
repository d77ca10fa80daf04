//! The FIM codecs against payloads written from the vendors' documentation.

use serde_json::json;

use crate::dialect::fim::{codestral, completions, ollama};
use crate::model::{FimRequest, StopReason, StreamEvent, Usage};

fn req() -> FimRequest {
    FimRequest {
        model: "tab".into(),
        prompt: "def add(a, b):\n    ".into(),
        suffix: "\n\nprint(add(1, 2))".into(),
        max_tokens: 64,
        stop: vec!["\n".into()],
        temperature: Some(0.0),
    }
}

#[test]
fn completions_request_has_prompt_suffix_and_usage_option() {
    assert_eq!(
        completions::encode_request(&req(), "deepseek-chat"),
        json!({
            "model": "deepseek-chat", "prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))",
            "max_tokens": 64, "stop": ["\n"], "temperature": 0.0, "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn completions_stream_text_finish_and_usage() {
    let ev = completions::decode_event(
        r#"{"id":"c1","object":"text_completion","choices":[{"text":"return a + b","index":0,"finish_reason":null}]}"#,
    )
    .expect("decodes");
    assert_eq!(ev, vec![StreamEvent::TextDelta { text: "return a + b".into() }]);
    let ev = completions::decode_event(
        r#"{"choices":[{"text":"","index":0,"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":5,"total_tokens":35,"prompt_cache_hit_tokens":10}}"#,
    )
    .expect("decodes");
    assert_eq!(
        ev,
        vec![
            StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None },
            StreamEvent::Usage {
                usage: Usage { input_tokens: 20, cache_read_tokens: 10, output_tokens: 5, ..Usage::default() }
            },
        ]
    );
    assert!(completions::decode_event("[DONE]").expect("done").is_empty());
}

#[test]
fn codestral_request_and_chunks() {
    let mut r = req();
    r.stop.clear();
    r.temperature = None;
    assert_eq!(
        codestral::encode_request(&r, "codestral-latest"),
        json!({"model": "codestral-latest", "prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))",
               "max_tokens": 64, "stream": true})
    );
    let ev = codestral::decode_event(
        r#"{"id":"x","object":"chat.completion.chunk","model":"codestral-latest","choices":[{"index":0,"delta":{"role":"assistant","content":"return"},"finish_reason":null}]}"#,
    )
    .expect("decodes");
    assert_eq!(ev, vec![StreamEvent::TextDelta { text: "return".into() }]);
    let ev = codestral::decode_event(
        r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":64,"total_tokens":72}}"#,
    )
    .expect("decodes");
    assert_eq!(ev[0], StreamEvent::Stop { reason: StopReason::MaxTokens, stop_sequence: None });
}

#[test]
fn ollama_request_lines_and_error() {
    assert_eq!(
        ollama::encode_request(&req(), "qwen2.5-coder:1.5b"),
        json!({"model": "qwen2.5-coder:1.5b", "prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(1, 2))",
               "stream": true, "options": {"num_predict": 64, "stop": ["\n"], "temperature": 0.0}})
    );
    let ev =
        ollama::decode_line(r#"{"model":"m","created_at":"2024-01-01T00:00:00Z","response":"return","done":false}"#)
            .expect("line");
    assert_eq!(ev, vec![StreamEvent::TextDelta { text: "return".into() }]);
    let ev = ollama::decode_line(
        r#"{"model":"m","response":"","done":true,"done_reason":"stop","prompt_eval_count":12,"eval_count":3}"#,
    )
    .expect("line");
    assert_eq!(
        ev,
        vec![
            StreamEvent::Usage { usage: Usage { input_tokens: 12, output_tokens: 3, ..Usage::default() } },
            StreamEvent::Stop { reason: StopReason::EndTurn, stop_sequence: None },
        ]
    );
    let ev = ollama::decode_line(r#"{"error":"model 'x' not found"}"#).expect("line");
    assert!(matches!(&ev[..], [StreamEvent::Error { error }] if error.message.contains("not found")));
    assert!(ollama::decode_line("not json").is_err());
}
