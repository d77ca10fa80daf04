//! Unit tests of the Cursor tool catalog, edits and JSON conversion, the interaction tools, the
//! streamed-argument scanner, and the web search tool's approval flow (with a fake provider).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cursor::protocol::agent::{self, AgentMode, interaction_response, web_search_request_response};
use crate::cursor::tools::catalog::Catalog;
use crate::cursor::tools::dispatch::CursorTools;
use crate::cursor::tools::exec::ExecChannel;
use crate::cursor::tools::query::QueryChannel;
use crate::cursor::tools::web::UNAVAILABLE;
use crate::cursor::transport::Output;
use crate::run::{ToolCall, ToolContext, ToolHost};
use crate::search::{SearchError, SearchHit, SearchProvider};

#[derive(Debug)]
struct Fake;

impl SearchProvider for Fake {
    fn search<'a>(&'a self, query: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(async move {
            Ok(vec![SearchHit {
                title: format!("About {query}"),
                url: "https://example.test/a".into(),
                snippet: format!("limit {limit}"),
            }])
        })
    }
}

fn tools(search: Option<Arc<dyn SearchProvider>>) -> (CursorTools, Arc<QueryChannel>) {
    let output = Arc::new(Output::new(1 << 20));
    let queries = QueryChannel::new(output.clone(), Duration::from_secs(5));
    let t = CursorTools {
        catalog: Arc::new(Catalog::build(AgentMode::Agent, &[])),
        exec: ExecChannel::new(output.clone(), Duration::from_secs(5)),
        output,
        workspace: None,
        todos: Arc::default(),
        queries: queries.clone(),
        search,
        fetcher: None,
        mode: Arc::new(crate::cursor::tools::interact::ModeCell::new(AgentMode::Agent)),
        blobs: None,
        terminals_folder: None,
    };
    (t, queries)
}

fn call() -> (ToolCall, ToolContext) {
    (
        ToolCall { id: "c1".into(), name: "web_search".into(), input: json!({"query": "rust async"}) },
        ToolContext { run_id: "r1".into(), step: 1, cancel: CancellationToken::new() },
    )
}

/// Answers the first query with `result` once it is waiting.
async fn answer(queries: &QueryChannel, result: web_search_request_response::Result) {
    while queries.pending() == 0 {
        tokio::task::yield_now().await;
    }
    queries.deliver(agent::InteractionResponse {
        id: 1,
        result: Some(interaction_response::Result::WebSearchRequestResponse(agent::WebSearchRequestResponse {
            result: Some(result),
        })),
    });
}

#[tokio::test]
async fn an_approved_search_runs_on_the_provider() {
    let (t, queries) = tools(Some(Arc::new(Fake)));
    let (c, ctx) = call();
    let approve = web_search_request_response::Result::Approved(agent::WebSearchApproved {});
    let (out, ()) = futures::future::join(t.execute(c, ctx), answer(&queries, approve)).await;
    assert!(!out.is_error);
    assert!(out.joined_text().contains("About rust async") && out.joined_text().contains("https://example.test/a"));
    assert_eq!(queries.pending(), 0);
}

#[tokio::test]
async fn a_rejected_search_is_an_error_with_the_reason() {
    let (t, queries) = tools(Some(Arc::new(Fake)));
    let (c, ctx) = call();
    let reject = web_search_request_response::Result::Rejected(agent::WebSearchRejected { reason: "offline".into() });
    let (out, ()) = futures::future::join(t.execute(c, ctx), answer(&queries, reject)).await;
    assert!(out.is_error);
    assert_eq!(out.joined_text(), "The user declined the web search: offline.");
}

#[tokio::test]
async fn without_a_provider_the_model_is_told_search_is_unavailable() {
    let (t, queries) = tools(None);
    let (c, ctx) = call();
    let out = t.execute(c, ctx).await;
    assert!(out.is_error);
    assert_eq!(out.joined_text(), UNAVAILABLE);
    assert_eq!(queries.pending(), 0, "nothing to approve");
}

// --- Interaction tools (interact.rs)

mod interact {
    use crate::cursor::protocol::agent::{self as pb, AgentMode as Mode};
    use crate::cursor::tools::interact::{SWITCHABLE, mode_id, parse_mode, questions, render_answers};

    fn ask(v: serde_json::Value) -> Result<pb::AskQuestionArgs, String> {
        questions(serde_json::from_value(v).map_err(|e| e.to_string())?)
    }

    #[test]
    fn question_ids_are_filled_in_and_answers_render_labels() {
        let args = ask(serde_json::json!({"questions": [
            {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "Postgres"}]},
            {"id": "style", "prompt": "Tabs?", "options": [{"id": "y", "label": "Yes"}, {"id": "n", "label": "No"}]}
        ]}))
        .unwrap_or_default();
        assert_eq!(args.questions[0].id, "q1");
        assert_eq!(args.questions[0].options[1].id, "b");
        assert_eq!(args.questions[1].id, "style");
        let success = pb::AskQuestionSuccess {
            answers: vec![pb::AskQuestionAnswer {
                question_id: "q1".into(),
                selected_option_ids: vec!["b".into()],
                freeform_text: None,
            }],
        };
        let text = render_answers(&args, &success);
        assert!(text.contains("Which database? → Postgres"), "{text}");
        assert!(text.contains("Tabs? → (no answer)"), "{text}");
    }

    #[test]
    fn malformed_questions_are_refused() {
        assert!(ask(serde_json::json!({"questions": []})).is_err());
        assert!(
            ask(serde_json::json!({"questions": [{"prompt": " ", "options": [{"label": "a"}, {"label": "b"}]}]}))
                .is_err()
        );
        assert!(ask(serde_json::json!({"questions": [{"prompt": "One?", "options": [{"label": "only"}]}]})).is_err());
    }

    #[test]
    fn modes_parse_and_print() {
        for id in SWITCHABLE {
            assert_eq!(parse_mode(id).map(mode_id), Some(id));
        }
        assert_eq!(parse_mode(" Agent "), Some(Mode::Agent));
        assert_eq!(parse_mode("yolo"), None);
    }
}

// --- Streamed arguments (stream.rs)

mod stream {
    use crate::cursor::tools::stream::FieldStream;

    /// Feeds `text` in chunks of `n` characters and joins what comes out.
    fn stream(text: &str, key: &'static str, n: usize) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut s = FieldStream::new(key);
        chars.chunks(n).map(|c| s.push(&c.iter().collect::<String>())).collect()
    }

    /// A small deterministic generator (xorshift), so the cases are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
        }
    }

    #[test]
    fn random_values_round_trip_and_random_bytes_never_panic() {
        let alphabet: Vec<char> = "ab \"\\/\n\t{}[]:,é😀\u{1}\u{7f}\u{2028}".chars().collect();
        let mut rng = Rng(0x5eed_cafe);
        for _ in 0..500 {
            let len = rng.below(40);
            let value: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            let json = serde_json::json!({"a": [1, {"contents": "x"}], "contents": value, "z": null}).to_string();
            // Valid JSON in random chunks: exactly the value.
            let chars: Vec<char> = json.chars().collect();
            let mut f = FieldStream::new("contents");
            let mut out = String::new();
            let mut i = 0;
            while i < chars.len() {
                let n = 1 + rng.below(8);
                let end = (i + n).min(chars.len());
                out.push_str(&f.push(&chars[i..end].iter().collect::<String>()));
                i = end;
            }
            assert_eq!(out, value, "{json}");
            // The same text cut short or mangled: no panic, and never more than the value's length.
            let cut = rng.below(chars.len() + 1);
            let mut mangled: Vec<char> = chars[..cut].to_vec();
            if !mangled.is_empty() {
                let at = rng.below(mangled.len());
                mangled[at] = alphabet[rng.below(alphabet.len())];
            }
            let got = stream(&mangled.iter().collect::<String>(), "contents", 1 + rng.below(5));
            assert!(got.chars().count() <= json.chars().count(), "{got:?}");
        }
    }

    #[test]
    fn yields_the_decoded_field_whatever_the_chunking() {
        let value = "line \"one\"\n\ttab \\ slash / é 😀 end";
        let json = serde_json::json!({"path": "a.txt", "contents": value, "after": "x"}).to_string();
        // serde_json leaves non-ASCII as is; also try the fully escaped form.
        let escaped = json.replace('é', "\\u00e9").replace('😀', "\\ud83d\\ude00");
        for text in [&json, &escaped] {
            for n in [1, 2, 3, 5, 7, 64, 10_000] {
                assert_eq!(stream(text, "contents", n), value, "chunks of {n}: {text}");
            }
        }
    }

    #[test]
    fn ignores_the_key_inside_nested_values_and_other_strings() {
        let text = r#"{"meta": {"contents": "nested"}, "note": "\"contents\": \"fake\"", "contents": "real"}"#;
        assert_eq!(stream(text, "contents", 1), "real");
        assert_eq!(stream(r#"{"list": ["contents", "x"], "contents": "y"}"#, "contents", 2), "y");
    }

    #[test]
    fn yields_nothing_for_other_shapes_or_garbage() {
        for text in [
            r#"{"contents": 42}"#,
            r#"{"contents": null, "other": "x"}"#,
            r#"["contents", "x"]"#,
            "not json at all",
            r#"{"path": "a"}"#,
            "",
            r#"{"contents"#,
        ] {
            assert_eq!(stream(text, "contents", 1), "", "{text}");
        }
    }

    #[test]
    fn a_truncated_value_yields_what_arrived_and_broken_escapes_never_panic() {
        assert_eq!(stream(r#"{"contents": "abc\u00"#, "contents", 1), "abc");
        assert_eq!(stream(r#"{"contents": "a\q\uZZZZ\ud83d!"}"#, "contents", 1), "a\\q\u{fffd}\u{fffd}!");
        assert_eq!(stream(r#"{"contents": "\udc00x"}"#, "contents", 3), "\u{fffd}x");
    }
}

#[test]
fn an_unknown_or_custom_mode_gets_the_ask_tool_set() {
    use crate::cursor::tools::catalog::mode_from_wire;
    let names = |mode: AgentMode| -> Vec<String> {
        let mcp = [agent::McpToolDefinition { name: "deploy".into(), ..Default::default() }];
        Catalog::build(mode, &mcp).defs().iter().map(|d| d.name.clone()).collect()
    };
    // Known values keep their meaning (0, unspecified, is the agent set as before).
    assert_eq!(mode_from_wire(0), AgentMode::Unspecified);
    assert_eq!(mode_from_wire(1), AgentMode::Agent);
    assert_eq!(mode_from_wire(3), AgentMode::Plan);
    // AGENT_MODE_CUSTOM (8 on Cursor 3.x) and values no build knows: ask.
    for value in [8, 9, 42, -1, i32::MAX] {
        assert_eq!(mode_from_wire(value), AgentMode::Ask, "mode value {value}");
    }
    let ask = vec![
        "read_file",
        "grep",
        "glob_file_search",
        "list_dir",
        "todo_write",
        "read_lints",
        "fetch_url",
        "web_search",
        "ask_question",
        "create_plan",
        "switch_mode",
    ];
    assert_eq!(names(mode_from_wire(8)), ask);
    assert_eq!(names(AgentMode::Ask), ask);
    let full = names(mode_from_wire(1));
    for tool in ["write_file", "edit_file", "run_terminal_cmd", "delete_file", "deploy"] {
        assert!(full.contains(&tool.to_owned()), "agent mode offers {tool}");
    }
}
