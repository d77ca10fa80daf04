//! The user's context reaches the model, and every card decodes in the IDE (issue 15), end to
//! end through the Cursor client simulator:
//!
//! - the `read_lints` card has the public shapes (`ReadLintsToolSuccess{FileDiagnostics}`,
//!   docs/cursor-wire.md §6.6), and the independent description of the wire types rejects the old
//!   exec-shaped card;
//! - each kind of `SelectedContext` becomes the exact block the model receives (expected blocks
//!   written by hand from the format documented in `cursor::agent::context`); files sent as a path
//!   are read through an exec; a block already in the transcript is not repeated;
//! - rules by type, user rules, skills and MCP instructions; web search turned off;
//! - a prompt moved to a blob (`text_blob_id`), from `pre_fetched_blobs` and over KV;
//! - images as each provider dialect's image part (OpenAI Chat `image_url`, Anthropic `image`
//!   with a base64 source, Responses `input_image`), and a model without vision told in words;
//! - a run request at append seqno 5; a backgrounded shell (its terminal, process and where its
//!   later output is read); a free-text answer; a read delivered
//!   as `output_blob_id`; `ToolCall.tool_call_id` on cards.

use std::sync::Arc;

use keyhaven::cursor::protocol::agent::{
    self, agent_server_message, exec_client_message, interaction_response, interaction_update, read_lints_tool_result,
    shell_stream, tool_call,
};
use serde_json::{Value, json};

use crate::support::cursor_client::{self, Act, CursorSim, Turn, oa_text, oa_tools, run_everything};
use crate::support::cursor_raw::{int, st};
use crate::support::cursor_schema;
use crate::support::fixtures::{Case, upstream_sse};
use crate::support::{Reply, Up};

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R'];
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUg==";

fn sha(data: &[u8]) -> Vec<u8> {
    keyhaven::cursor::blobs::blob_id(data).to_vec()
}

/// The last user message of the provider's `i`-th request, as OpenAI Chat content parts.
fn user_parts(s: &CursorSim, i: usize) -> Vec<Value> {
    let body = s.mock.seen()[i].body.clone();
    let user = body["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "user").cloned();
    match &user.expect("a user message")["content"] {
        Value::String(t) => vec![json!({"type": "text", "text": t})],
        Value::Array(a) => a.clone(),
        other => panic!("unexpected content {other}"),
    }
}

fn texts(parts: &[Value]) -> Vec<String> {
    parts.iter().filter(|p| p["type"] == "text").map(|p| p["text"].as_str().expect("text").to_owned()).collect()
}

fn system(s: &CursorSim, i: usize) -> String {
    let body = s.mock.seen()[i].body.clone();
    body["messages"][0]["content"].as_str().expect("system text").to_owned()
}

fn range(a: u32, b: u32) -> Option<agent::Range> {
    Some(agent::Range {
        start: Some(agent::Position { line: a, column: 0 }),
        end: Some(agent::Position { line: b, column: 4 }),
    })
}

fn rule(path: &str, content: &str, ty: agent::cursor_rule_type::Type) -> agent::CursorRule {
    agent::CursorRule {
        full_path: path.into(),
        content: content.into(),
        r#type: Some(agent::CursorRuleType { r#type: Some(ty) }),
    }
}

// ---------------------------------------------------------------------------------------------
// Cards

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_lints_card_has_the_public_shape() {
    let s = cursor_client::start("").await;
    s.ws.write("src/lib.rs", "fn a() {}\n// FIXME: handle errors\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-lint", "read_lints", json!({"path": "src/lib.rs"}))])));
    s.mock.push(Reply::sse(&oa_text("ok")));
    let seen = s.turn(&Turn::new("req-lint", "conv-lint", "lint it")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let card = seen.completed("c-lint");
    assert_eq!(card.tool_call_id.as_deref(), Some("c-lint"), "3.x cards carry their call id");
    let Some(tool_call::Tool::ReadLintsToolCall(lints)) = card.tool else { panic!("read_lints card") };
    let path = format!("{}/src/lib.rs", s.ws.root_str());
    assert_eq!(lints.args, Some(agent::ReadLintsToolArgs { paths: vec![path.clone()] }));
    let Some(read_lints_tool_result::Result::Success(ok)) = lints.result.and_then(|r| r.result) else {
        panic!("success")
    };
    assert_eq!((ok.total_files, ok.total_diagnostics), (1, 1));
    assert_eq!(
        ok.file_diagnostics,
        vec![agent::FileDiagnostics {
            path,
            diagnostics_count: 1,
            diagnostics: vec![agent::DiagnosticItem {
                severity: 2,
                range: Some(agent::Range {
                    start: Some(agent::Position { line: 1, column: 3 }),
                    end: Some(agent::Position { line: 1, column: 8 }),
                }),
                message: "unresolved FIXME: // FIXME: handle errors".into(),
                source: "sim-lint".into(),
                code: "FIX1".into(),
                is_stale: false,
            }],
        }]
    );
    s.te.stop().await;
}

/// Hand-encoded protobuf: a length-delimited field.
fn ld(field: u64, body: &[u8]) -> Vec<u8> {
    let mut out = vec![u8::try_from(field << 3 | 2).expect("small field")];
    out.push(u8::try_from(body.len()).expect("short body"));
    out.extend_from_slice(body);
    out
}

fn varint_field(field: u64, v: u8) -> Vec<u8> {
    vec![u8::try_from(field << 3).expect("small field"), v]
}

#[test]
fn the_independent_description_rejects_the_old_exec_shaped_lints_card() {
    // ToolCall{read_lints_tool_call=14{args=1 DiagnosticsArgs{path=1, tool_call_id=2},
    //   result=2 DiagnosticsResult{success=1 DiagnosticsSuccess{path=1 "a.rs", total=3}}}}
    let args = [ld(1, b"a.rs"), ld(2, b"c1")].concat();
    let success = [ld(1, b"a.rs"), varint_field(3, 0)].concat();
    let old = ld(14, &[ld(1, &args), ld(2, &ld(1, &success))].concat());
    let err = cursor_schema::check("ToolCall", &old).expect_err("the old card is refused");
    assert!(err.contains("ToolCall.14(ReadLintsToolCall).1(ReadLintsToolArgs).2"), "{err}");
    // The public shape passes: paths, then success{file_diagnostics{path, count}, totals}.
    let file = [ld(1, b"a.rs"), varint_field(3, 0)].concat();
    let good = ld(14, &[ld(1, &ld(1, b"a.rs")), ld(2, &ld(1, &[ld(1, &file), varint_field(2, 1)].concat()))].concat());
    cursor_schema::check("ToolCall", &good).expect("the public card");
    // A wire-type clash (text as a varint) and an unknown field are refused too.
    let clash = varint_field(1, 1);
    assert!(cursor_schema::check("TextDeltaUpdate", &clash).expect_err("clash").contains("wire type 0"));
    assert!(cursor_schema::check("TextDeltaUpdate", &ld(9, b"x")).expect_err("unknown").contains("not a field"));
}

// ---------------------------------------------------------------------------------------------
// Context blocks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_attachment_is_a_delimited_block_in_the_prompt() {
    let s = cursor_client::start("").await;
    let root = s.ws.root_str();
    s.ws.write("src/b.rs", "fn b() {}\n");
    s.mock.push(Reply::sse(&oa_text("seen")));
    let mut turn = Turn::new("req-ctx", "conv-ctx", "review all this");
    turn.selected = Some(agent::SelectedContext {
        files: vec![
            agent::SelectedFile {
                content: "fn a() {}\n".into(),
                path: format!("{root}/src/a.rs"),
                relative_path: Some("src/a.rs".into()),
            },
            agent::SelectedFile { content: String::new(), path: format!("{root}/src/b.rs"), relative_path: None },
        ],
        code_selections: vec![agent::SelectedCodeSelection {
            content: "let x = 1;".into(),
            path: format!("{root}/src/c.rs"),
            relative_path: Some("src/c.rs".into()),
            range: range(3, 5),
        }],
        terminals: vec![agent::SelectedTerminal {
            content: "$ cargo build\nerror".into(),
            title: Some("zsh".into()),
            path: None,
        }],
        terminal_selections: vec![agent::SelectedTerminalSelection {
            content: "error[E0001]".into(),
            title: Some("zsh".into()),
            path: None,
            range: range(2, 2),
        }],
        folders: vec![agent::SelectedFolder { path: format!("{root}/src"), relative_path: Some("src".into()) }],
        external_links: vec![agent::SelectedExternalLink {
            url: "https://example.test/x".into(),
            ..Default::default()
        }],
        cursor_commands: vec![agent::SelectedCursorCommand {
            name: "review".into(),
            content: "Review the diff.".into(),
            ..Default::default()
        }],
        documentations: vec![agent::SelectedDocumentation { doc_id: "d1".into(), name: "Tokio".into() }],
        console_logs: vec![agent::SelectedConsoleLog {
            message: "boom".into(),
            level: "error".into(),
            client_name: "chrome".into(),
            ..Default::default()
        }],
        extra_context_entries: vec![agent::ExtraContextEntry {
            data_or_blob_id: Some(agent::extra_context_entry::DataOrBlobId::Data("extra note".into())),
        }],
        git_commits: vec![agent::SelectedGitCommit {
            sha: "abc123".into(),
            message: "fix: x".into(),
            description: None,
            diff: "--- a\n+++ b".into(),
        }],
        git_diff: Some(agent::SelectedGitDiff { content: "diff --git a b".into(), full_content_length_char_count: 14 }),
        past_chats: vec![agent::SelectedPastChat { agent_id: "chat-1".into(), name: "Earlier".into() }],
        selected_skills: vec![agent::AgentSkill {
            full_path: "/skills/s.md".into(),
            content: "Step 1".into(),
            description: "Do s".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let seen = s.turn(&turn).await;
    assert_eq!(seen.end, Some(Default::default()));
    let expected = vec![
        "<attached source=\"file\" path=\"src/a.rs\">\nfn a() {}\n</attached>".to_owned(),
        format!("<attached source=\"file\" path=\"{root}/src/b.rs\">\nfn b() {{}}\n</attached>"),
        "<attached source=\"selection\" path=\"src/c.rs\" lines=\"3-5\">\nlet x = 1;\n</attached>".to_owned(),
        "<attached source=\"terminal\" title=\"zsh\">\n$ cargo build\nerror\n</attached>".to_owned(),
        "<attached source=\"terminal_selection\" title=\"zsh\" lines=\"2\">\nerror[E0001]\n</attached>".to_owned(),
        "<attached source=\"folder\" path=\"src\">\n(a folder the user pointed at; list it with list_dir)\n</attached>"
            .to_owned(),
        "<attached source=\"link\" url=\"https://example.test/x\">\n(a link the user pasted; fetch it with fetch_url \
         if its content is needed)\n</attached>"
            .to_owned(),
        "<attached source=\"command\" name=\"review\">\nReview the diff.\n</attached>".to_owned(),
        "<attached source=\"docs\" name=\"Tokio\" id=\"d1\">\n(documentation the user referred to; Keyhaven has no \
         index of it)\n</attached>"
            .to_owned(),
        "<attached source=\"console_log\" level=\"error\" client=\"chrome\">\nboom\n</attached>".to_owned(),
        "<attached source=\"context\">\nextra note\n</attached>".to_owned(),
        "<attached source=\"commit\" sha=\"abc123\">\nfix: x\n\n--- a\n+++ b\n</attached>".to_owned(),
        "<attached source=\"git_diff\" scope=\"working tree\">\ndiff --git a b\n</attached>".to_owned(),
        "<attached source=\"past_chat\" name=\"Earlier\" id=\"chat-1\">\n(an earlier chat the user referred to; its \
         transcript is not available here)\n</attached>"
            .to_owned(),
        "<attached source=\"skill\" path=\"/skills/s.md\" description=\"Do s\">\nStep 1\n</attached>".to_owned(),
        "review all this".to_owned(),
    ];
    assert_eq!(texts(&user_parts(&s, 0)), expected);
    // The path-only file was read through an exec (no card for it).
    assert!(seen.execs().iter().any(|x| x.exec_id == "req-ctx:ctx1"));

    // The same file attached again: the transcript holds it already.
    s.mock.push(Reply::sse(&oa_text("again")));
    let mut again = Turn::new("req-ctx2", "conv-ctx", "and now?");
    again.selected = Some(agent::SelectedContext {
        files: vec![agent::SelectedFile {
            content: "fn a() {}\n".into(),
            path: format!("{root}/src/a.rs"),
            relative_path: Some("src/a.rs".into()),
        }],
        ..Default::default()
    });
    s.turn(&again).await;
    assert_eq!(
        texts(&user_parts(&s, 1)),
        vec![
            "<attached source=\"file\" path=\"src/a.rs\" unchanged=\"true\">\n(unchanged since it was attached \
             earlier in this conversation)\n</attached>"
                .to_owned(),
            "and now?".to_owned(),
        ]
    );
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_apply_by_type_with_user_rules_skills_and_mcp_instructions() {
    use agent::cursor_rule_type::Type;
    let s = cursor_client::start("").await;
    let root = s.ws.root_str();
    s.mock.push(Reply::sse(&oa_text("ok")));
    let mut turn = Turn::new("req-rules", "conv-rules", "go");
    turn.context = agent::RequestContext {
        rules: vec![
            rule("/r/global.mdc", "GLOBAL-RULE", Type::Global(agent::CursorRuleTypeGlobal {})),
            rule(
                "/r/rust.mdc",
                "RUST-RULE",
                Type::FileGlobbed(agent::CursorRuleTypeFileGlobs { globs: vec!["**/*.rs".into()] }),
            ),
            rule(
                "/r/py.mdc",
                "PY-RULE",
                Type::FileGlobbed(agent::CursorRuleTypeFileGlobs { globs: vec!["*.py".into()] }),
            ),
            rule(
                "/r/sql.mdc",
                "SQL-RULE",
                Type::AgentFetched(agent::CursorRuleTypeAgentFetched { description: "Use for SQL".into() }),
            ),
            rule("/r/manual.mdc", "MANUAL-RULE", Type::ManuallyAttached(agent::CursorRuleTypeManuallyAttached {})),
        ],
        non_file_rules: vec![agent::CursorRule { content: "Always answer in English.".into(), ..Default::default() }],
        agent_skills: vec![agent::AgentSkill {
            full_path: "/skills/k.md".into(),
            description: "Kubernetes".into(),
            ..Default::default()
        }],
        mcp_instructions: vec![agent::McpInstructions {
            server_name: "db".into(),
            instructions: "Use read-only queries.".into(),
            server_identifier: "db-1".into(),
        }],
        web_search_enabled: Some(false),
        ..Default::default()
    };
    turn.selected = Some(agent::SelectedContext {
        files: vec![agent::SelectedFile {
            content: "fn a() {}".into(),
            path: format!("{root}/src/a.rs"),
            relative_path: Some("src/a.rs".into()),
        }],
        ..Default::default()
    });
    s.turn(&turn).await;
    let sys = system(&s, 0);
    for part in [
        "\nUser rule:\nAlways answer in English.\n",
        "\nRule (/r/global.mdc):\nGLOBAL-RULE\n",
        "\nRules to read with read_file when their description applies to the task:\n- /r/sql.mdc: Use for SQL\n",
        "\nSkills (read a skill's file with read_file before using it):\n- /skills/k.md: Kubernetes\n",
        "\nInstructions of the MCP server db:\nUse read-only queries.\n",
    ] {
        assert!(sys.contains(part), "{part:?} in {sys}");
    }
    for absent in ["RUST-RULE", "PY-RULE", "SQL-RULE", "MANUAL-RULE"] {
        assert!(!sys.contains(absent), "{absent} is not pasted into the system prompt");
    }
    assert_eq!(
        texts(&user_parts(&s, 0)),
        vec![
            "<attached source=\"file\" path=\"src/a.rs\">\nfn a() {}\n</attached>",
            "<attached source=\"rule\" path=\"/r/rust.mdc\" type=\"file_globbed\">\nRUST-RULE\n</attached>",
            "<attached source=\"rule\" path=\"/r/manual.mdc\" type=\"manually_attached\">\nMANUAL-RULE\n</attached>",
            "go",
        ]
    );
    let tools: Vec<String> = s.mock.seen()[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name").to_owned())
        .collect();
    assert!(!tools.iter().any(|t| t == "web_search"), "web search turned off: {tools:?}");
    assert!(tools.iter().any(|t| t == "fetch_url"), "fetch stays on: {tools:?}");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_moved_to_a_blob_is_read_before_the_model_call() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("one")));
    s.mock.push(Reply::sse(&oa_text("two")));
    let long = "a very long prompt ".repeat(50);
    let mut turn = Turn::new("req-blob1", "conv-blob", "");
    turn.text_blob_id = Some(sha(long.as_bytes()));
    turn.pre_fetched_blobs = vec![agent::PreFetchedBlob { id: sha(long.as_bytes()), value: long.clone().into_bytes() }];
    s.turn(&turn).await;
    assert_eq!(texts(&user_parts(&s, 0)), vec![long.clone()]);
    // Not pre-fetched: read from the client's blob store over KV.
    let other = "the second long prompt".to_owned();
    s.blobs.lock().expect("blobs").insert(sha(other.as_bytes()), other.clone().into_bytes());
    let mut turn = Turn::new("req-blob2", "conv-blob", "");
    turn.text_blob_id = Some(sha(other.as_bytes()));
    let seen = s.turn(&turn).await;
    assert!(seen.kv_log.iter().any(|l| l == &format!("get {}", hex::encode(sha(other.as_bytes())))));
    assert_eq!(texts(&user_parts(&s, 1)), vec![other]);
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Images

fn image_turn(id: &str, model: &str, image: agent::SelectedImage) -> Turn {
    let mut t = Turn::new(id, &format!("conv-{id}"), "what is this?");
    t.model = model.into();
    t.selected = Some(agent::SelectedContext { selected_images: vec![image], ..Default::default() });
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_reach_vision_models_as_each_dialects_image_part() {
    use agent::selected_image::DataOrBlobId;
    let s = cursor_client::start("").await;
    let data_url = format!("data:image/png;base64,{PNG_B64}");

    // OpenAI Chat, inline bytes.
    s.mock.push(Reply::sse(&oa_text("a png")));
    let inline = agent::SelectedImage {
        data_or_blob_id: Some(DataOrBlobId::Data(PNG.to_vec())),
        mime_type: "image/png".into(),
        ..Default::default()
    };
    s.turn(&image_turn("img-oa", "oa-model", inline)).await;
    assert_eq!(
        user_parts(&s, 0),
        vec![
            json!({"type": "image_url", "image_url": {"url": data_url}}),
            json!({"type": "text", "text": "what is this?"}),
        ]
    );

    // Anthropic Messages, bytes in pre_fetched_blobs (media type sniffed).
    s.mock.push(Reply::sse(&upstream_sse(Up::Anthropic, Case::Text)));
    let mut t = image_turn(
        "img-an",
        "an-model",
        agent::SelectedImage { data_or_blob_id: Some(DataOrBlobId::BlobId(sha(PNG))), ..Default::default() },
    );
    t.pre_fetched_blobs = vec![agent::PreFetchedBlob { id: sha(PNG), value: PNG.to_vec() }];
    s.turn(&t).await;
    let body = s.mock.seen()[1].body.clone();
    let content = body["messages"].as_array().expect("messages").last().expect("user")["content"].clone();
    assert_eq!(
        content[0],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}})
    );
    assert_eq!(content[1]["text"], "what is this?");

    // OpenAI Responses, bytes from the client's KV store.
    s.blobs.lock().expect("blobs").insert(sha(PNG), PNG.to_vec());
    s.mock.push(Reply::sse(&upstream_sse(Up::Responses, Case::Text)));
    let t = image_turn(
        "img-rs",
        "rs-model",
        agent::SelectedImage { data_or_blob_id: Some(DataOrBlobId::BlobId(sha(PNG))), ..Default::default() },
    );
    s.turn(&t).await;
    let body = s.mock.seen()[2].body.clone();
    let user =
        body["input"].as_array().expect("input").iter().rev().find(|m| m["role"] == "user").cloned().expect("user");
    assert_eq!(user["content"][0], json!({"type": "input_image", "image_url": data_url}));
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_vision_is_told_an_image_was_attached_and_the_user_sees_a_notice() {
    let blind = "\n[[models]]\nname = \"blind-model\"\nprovider = \"oa\"\nupstream = \"text-only\"\n\
                 capabilities = { tools = true, vision = false }\n";
    let s = cursor_client::start_with("", blind).await;
    s.mock.push(Reply::sse(&oa_text("I cannot see it")));
    let img = agent::SelectedImage {
        data_or_blob_id: Some(agent::selected_image::DataOrBlobId::Data(PNG.to_vec())),
        path: "shot.png".into(),
        ..Default::default()
    };
    let seen = s.turn(&image_turn("img-blind", "blind-model", img)).await;
    let parts = user_parts(&s, 0);
    assert!(parts.iter().all(|p| p["type"] == "text"), "no image part: {parts:?}");
    assert_eq!(
        texts(&parts),
        vec![
            "<attached source=\"image\" path=\"shot.png\">\n(the user attached an image here; the selected model \
             cannot see images, so it was not shown)\n</attached>",
            "what is this?",
        ]
    );
    let notice = seen.updates().into_iter().find_map(|u| match u {
        interaction_update::Message::TextDelta(t) if t.is_server_notice => Some(t.text),
        _ => None,
    });
    assert_eq!(
        notice.as_deref(),
        Some(
            "> Keyhaven: The selected model cannot see images: shot.png was not sent to it. Pick a model with \
             vision to include images.\n\n"
        )
    );
    s.te.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Transport and results

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_request_at_seqno_five_starts_the_run() {
    // Local mode (the run driver's inbox takes the run request at seqno 5) and hybrid mode, the
    // default (`api::cursor::routes` decides the route on the run request whatever its seqno).
    for mode in ["local", "hybrid"] {
        let s = cursor_client::start_with("", &format!("\n[proxy]\nmode = \"{mode}\"\n")).await;
        s.mock.push(Reply::sse(&oa_text("from five")));
        let run = s.start_run_at(&Turn::new("req-seq5", "conv-seq5", "hello"), 5, run_everything()).await;
        let seen = run.finish().await;
        assert_eq!(seen.end, Some(Default::default()), "{mode}");
        assert!(
            seen.updates().contains(&interaction_update::Message::TextDelta(agent::TextDeltaUpdate {
                text: "from five".into(),
                is_server_notice: false,
            })),
            "{mode}: the run answered without waiting for seqno 0"
        );
        assert!(seen.turn_ended().is_some(), "{mode}");
        s.te.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backgrounded_shells_free_text_answers_and_blob_reads_reach_the_model() {
    let mut s = cursor_client::start("").await;
    let big = "line of a large file\n".repeat(20);
    s.blobs.lock().expect("blobs").insert(sha(big.as_bytes()), big.clone().into_bytes());
    // The user types an answer instead of picking an option.
    s.user = Arc::new(|q| match q.query.as_ref()? {
        agent::interaction_query::Query::AskQuestionInteractionQuery(a) => {
            let qid = a.args.as_ref().and_then(|x| x.questions.first()).map(|q| q.id.clone()).unwrap_or_default();
            Some(interaction_response::Result::AskQuestionInteractionResponse(agent::AskQuestionInteractionResponse {
                result: Some(agent::AskQuestionResult {
                    result: Some(agent::ask_question_result::Result::Success(agent::AskQuestionSuccess {
                        answers: vec![agent::AskQuestionAnswer {
                            question_id: qid,
                            selected_option_ids: vec![],
                            freeform_text: Some("use postgres".into()),
                        }],
                    })),
                }),
            }))
        }
        _ => None,
    });
    s.mock.push(Reply::sse(&oa_tools(&[
        ("c-bg", "run_terminal_cmd", json!({"command": "npm run dev"})),
        (
            "c-ask",
            "ask_question",
            json!({"questions": [{"prompt": "Which database?", "options": [{"label": "sqlite"}, {"label": "mysql"}]}]}),
        ),
        ("c-big", "read_file", json!({"path": "big.txt"})),
    ])));
    s.mock.push(Reply::sse(&oa_text("done")));
    let blob_id = sha(big.as_bytes());
    let policy: cursor_client::Policy = Arc::new(move |x: &agent::ExecServerMessage| match &x.message {
        Some(agent::exec_server_message::Message::ShellStreamArgs(_)) => {
            // ShellStreamBackgrounded{shell_id=1 4, command=2, pid=4 4242, reason=6 TIMEOUT 1},
            // hand-encoded from docs/cursor-wire.md §4.8.
            let raw = [int(1, 4), st(2, "npm run dev"), int(4, 4242), int(6, 1)].concat();
            let b = <agent::ShellStreamBackgrounded as prost::Message>::decode(raw.as_slice()).expect("backgrounded");
            Act::Reply(exec_client_message::Message::ShellStream(agent::ShellStream {
                event: Some(shell_stream::Event::Backgrounded(b)),
            }))
        }
        Some(agent::exec_server_message::Message::ReadArgs(a)) if a.path.ends_with("big.txt") => {
            Act::Reply(exec_client_message::Message::ReadResult(agent::ReadResult {
                result: Some(agent::read_result::Result::Success(agent::ReadSuccess {
                    path: a.path.clone(),
                    output_blob_id: Some(blob_id.clone()),
                    ..Default::default()
                })),
            }))
        }
        _ => Act::Run,
    });
    let seen = s.start_run(&Turn::new("req-res", "conv-res", "start it"), policy).await.finish().await;
    assert_eq!(seen.end, Some(Default::default()));
    let Some(tool_call::Tool::ShellToolCall(shell)) = seen.completed("c-bg").tool else { panic!("shell card") };
    let result = shell.result.expect("result");
    assert_eq!(result.is_background, Some(true));
    assert_eq!(result.pid, Some(4242));
    assert_eq!(result.terminals_folder.as_deref(), Some(cursor_client::TERMINALS));
    assert!(matches!(result.result, Some(agent::shell_result::Result::Success(_))), "running, not failed");
    let body = s.mock.seen()[1].body.clone();
    let tool = |id: &str| {
        body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .expect("tool result")
    };
    assert_eq!(
        tool("c-bg"),
        format!(
            "The command is still running in the background (the editor moved it there); it has not failed.\n\
             It runs in terminal 4 (process 4242).\n\
             Its later output goes to the terminal's file in {}: list that folder with list_dir and read the file \
             with read_file to see how it is doing.\n",
            cursor_client::TERMINALS
        )
    );
    assert_eq!(tool("c-ask"), "The user answered:\n- Which database? → \"use postgres\" (typed by the user)\n");
    assert_eq!(tool("c-big"), big);
    // Every card of the run carries its call id.
    for m in &seen.msgs {
        if let Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
            message: Some(interaction_update::Message::ToolCallCompleted(c)),
        })) = &m.message
        {
            assert_eq!(c.tool_call.as_ref().and_then(|t| t.tool_call_id.as_deref()), Some(c.call_id.as_str()));
        }
    }
    s.te.stop().await;
}
