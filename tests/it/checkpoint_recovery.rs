//! Checkpoints and recovery (issue 5): blobs are acknowledged before the checkpoint that
//! references them; checkpoints come after a tool round starts, after its results and before
//! `turn_ended` (also after a cancel); an engine with a fresh data directory continues a
//! conversation from the incoming state alone (blobs fetched with `get_blob_args` or taken from
//! `pre_fetched_blobs`, each verified) and refuses a corrupt blob with a defined error; a dropped
//! RunSSE gets the replay on re-subscription, a resume continues an unfinished step and does
//! nothing for a completed conversation, and a run nobody reads is canceled after the grace
//! period; a large conversation's checkpoints stay under 512 KB; pending messages and the
//! acknowledged blob ids survive an engine restart (acks trusted only while the client's request
//! references them); todos written during a turn are in that turn's checkpoints and survive a
//! restart through the engine's stored checkpoint.

use std::collections::HashSet;
use std::time::Duration;

use keyhaven::cursor::checkpoint::MAX_WIRE_BYTES;
use keyhaven::cursor::protocol::agent::{self, agent_server_message, interaction_update};
use keyhaven::cursor::protocol::connect::Code;
use prost::Message;
use serde_json::{Value, json};

use crate::support::Reply;
use crate::support::cursor_client::{self, Act, CursorSim, Kv, Seen, Turn, oa_text, oa_text_unfinished, oa_tools};

/// Index of the first update matching `f`.
fn position(seen: &Seen, f: impl Fn(&interaction_update::Message) -> bool) -> usize {
    seen.msgs
        .iter()
        .position(|m| match &m.message {
            Some(agent_server_message::Message::InteractionUpdate(u)) => u.message.as_ref().is_some_and(&f),
            _ => false,
        })
        .expect("the update")
}

fn is_text(m: &agent::AgentServerMessage) -> bool {
    matches!(
        &m.message,
        Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
            message: Some(interaction_update::Message::TextDelta(_))
        }))
    )
}

fn checkpoint_positions(seen: &Seen) -> Vec<usize> {
    seen.msgs
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.message, Some(agent_server_message::Message::ConversationCheckpointUpdate(_))))
        .map(|(i, _)| i)
        .collect()
}

fn texts(body: &Value) -> Vec<String> {
    body["messages"].as_array().expect("messages").iter().map(|m| m["content"].to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_follow_acked_blobs_at_tool_start_results_and_before_turn_ended() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("It says alpha.")));
    let seen = s.turn(&Turn::new("req-cp", "conv-cp", "what is in a.txt?")).await;
    assert_eq!(seen.end, Some(Default::default()));

    // Blobs first: every `set` is acknowledged before the next checkpoint, and a checkpoint
    // references only blobs the client already acknowledged.
    let mut acked: HashSet<String> = HashSet::new();
    let mut set: HashSet<String> = HashSet::new();
    let states = seen.checkpoints();
    let mut n = 0;
    for line in &seen.kv_log {
        let (what, arg) = line.split_once(' ').expect("log line");
        match what {
            "set" => {
                set.insert(arg.to_owned());
            }
            "acked" => {
                acked.insert(arg.to_owned());
            }
            "checkpoint" => {
                assert_eq!(set, acked, "every blob sent so far is acknowledged before checkpoint {n}");
                for id in states[n].root_prompt_messages_json.iter().chain(&states[n].turns) {
                    assert!(acked.contains(&hex::encode(id)), "checkpoint {n} references an acknowledged blob");
                }
                n += 1;
            }
            other => panic!("unexpected KV event {other}"),
        }
    }
    assert_eq!(n, states.len());

    // At the listed points.
    let started = position(&seen, |u| matches!(u, interaction_update::Message::ToolCallStarted(_)));
    let completed = position(&seen, |u| matches!(u, interaction_update::Message::ToolCallCompleted(_)));
    let ended = position(&seen, |u| matches!(u, interaction_update::Message::TurnEnded(_)));
    let at = checkpoint_positions(&seen);
    assert_eq!(at.len(), 3, "after the tool call starts, after its result, before turn_ended: {at:?}");
    assert!(at[0] > started, "the first checkpoint follows tool_call_started");
    assert_eq!(states[0].pending_tool_calls.len(), 1, "it names the pending call");
    assert!(states[0].pending_tool_calls[0].contains("c-read"));
    assert!(at[1] > completed && states[1].pending_tool_calls.is_empty(), "after the result nothing is pending");
    let roles = |st: &agent::ConversationStateStructure| s.roots(st).iter().map(|r| r.role).collect::<Vec<_>>();
    use keyhaven::model::Role::{Assistant, System, Tool, User};
    assert_eq!(roles(&states[0]), vec![System, User, Assistant]);
    assert_eq!(roles(&states[1]), vec![System, User, Assistant, Tool]);
    assert_eq!(at[2], ended - 1, "the final checkpoint is the frame right before turn_ended");
    assert_eq!(roles(&states[2]), vec![System, User, Assistant, Tool, Assistant]);
    let last = &states[2];
    assert_eq!(last.turns.len(), 1);
    assert_eq!(last.mode, Some(agent::AgentMode::Agent as i32));
    assert_eq!(last.agent_type.as_deref(), Some("ide"));
    assert_eq!(last.previous_workspace_uris, vec![format!("file://{}", s.ws.root_str())]);
    assert_eq!(last.read_paths, vec!["a.txt".to_owned()]);
    let tokens = last.token_details.expect("token details");
    assert!(tokens.used_tokens > 0 && tokens.max_tokens > 0);
    // Stored too.
    s.te.handle.store.flush().await.expect("flush");
    let stored = s.te.handle.store.latest_checkpoint("conv-cp").await.expect("read").expect("a stored checkpoint");
    assert_eq!(agent::ConversationStateStructure::decode(stored.state.as_slice()).expect("state"), *last);
    assert_eq!(stored.seq, 5);

    // A cancel ends with a final checkpoint too.
    s.mock.push(Reply::sse(&oa_text_unfinished("thinking about it")).hang());
    let run = s.start_run(&Turn::new("req-cp2", "conv-cp", "and b.txt?"), cursor_client::run_everything()).await;
    run.wait_until(|m| m.iter().any(is_text)).await;
    run.cancel().await;
    let seen = run.finish().await;
    let ended = position(&seen, |u| matches!(u, interaction_update::Message::TurnEnded(_)));
    let at = checkpoint_positions(&seen);
    assert_eq!(at.last().copied(), Some(ended - 1), "checkpoint, then turn_ended");
    let state = seen.last_checkpoint().expect("final checkpoint");
    let last_root = s.roots(&state).pop().expect("roots");
    assert_eq!(last_root.role, Assistant, "the partial answer is in the checkpoint");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_recovery_a_fresh_data_dir_continues_from_the_incoming_state() {
    let s = cursor_client::start("").await;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-1", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("It says alpha.")));
    s.mock.push(Reply::sse(&oa_text("Second answer.")));
    let one = s.turn(&Turn::new("req-r1", "conv-r", "first question")).await;
    let two = s.turn(&Turn::new("req-r2", "conv-r", "second question").with_state(one.last_checkpoint())).await;
    assert_eq!(two.end, Some(Default::default()));
    let state = two.last_checkpoint().expect("checkpoint");
    let before = s.mock.seen().last().expect("request").body.clone();

    // A fresh data dir: nothing local; the engine fetches each root blob from the client.
    let s = s.fresh_data_dir().await;
    s.mock.push(Reply::sse(&oa_text("Third answer.")));
    let three = s.turn(&Turn::new("req-r3", "conv-r", "third question").with_state(Some(state.clone()))).await;
    assert_eq!(three.end, Some(Default::default()), "{:?}", three.end);
    let gets = three.kv_log.iter().filter(|l| l.starts_with("get ")).count();
    assert_eq!(gets, state.root_prompt_messages_json.len(), "one get_blob per root message");
    let after = s.mock.seen().last().expect("request").body.clone();
    let (b, a) = (before["messages"].as_array().expect("m"), after["messages"].as_array().expect("m"));
    assert_eq!(&a[..b.len()], &b[..], "the restored transcript gives the provider the same prefix, byte for byte");
    assert_eq!(a[b.len()]["content"], "Second answer.");
    assert_eq!(a.last().expect("user")["content"], "third question");
    // The restored messages are the local transcript again (source of truth from now on).
    let stored = s.te.handle.store.conversation_messages("conv-r").await.expect("messages");
    assert_eq!(stored.len(), 9, "system, user, tool call, result, answer, user, answer, user, answer");
    let state3 = three.last_checkpoint().expect("checkpoint");

    // Once more with pre_fetched_blobs: no round trips.
    let s = s.fresh_data_dir().await;
    s.mock.push(Reply::sse(&oa_text("Fourth answer.")));
    let mut turn = Turn::new("req-r4", "conv-r", "fourth question").with_state(Some(state3.clone()));
    turn.pre_fetched_blobs = {
        let store = s.blobs.lock().expect("blobs");
        state3
            .root_prompt_messages_json
            .iter()
            .map(|id| agent::PreFetchedBlob { id: id.clone(), value: store[id].clone() })
            .collect()
    };
    let four = s.turn(&turn).await;
    assert_eq!(four.end, Some(Default::default()));
    assert!(!four.kv_log.iter().any(|l| l.starts_with("get ")), "pre-fetched blobs need no get_blob");
    assert!(texts(&s.mock.seen().last().expect("request").body).iter().any(|t| t.contains("third question")));

    // A corrupt blob (content that does not hash to its id) is refused with a defined error, and
    // nothing reaches the provider.
    let s = s.fresh_data_dir().await;
    let calls = s.mock.seen().len();
    let mut turn = Turn::new("req-r5", "conv-r", "fifth question").with_state(Some(state3.clone()));
    turn.pre_fetched_blobs = state3
        .root_prompt_messages_json
        .iter()
        .map(|id| agent::PreFetchedBlob {
            id: id.clone(),
            value: b"{\"v\":1,\"id\":\"x\",\"role\":\"user\",\"content\":[]}".to_vec(),
        })
        .collect();
    let five = s.turn(&turn).await;
    let end = five.end.clone().expect("end-stream");
    let error = end.error.expect("a Connect error");
    assert_eq!(error.code, Code::InvalidArgument);
    assert!(error.message.contains("does not match its id"), "{}", error.message);
    assert!(five.turn_ended().is_none());
    assert_eq!(s.mock.seen().len(), calls, "no provider call");
    assert!(s.te.handle.store.conversation_messages("conv-r").await.expect("messages").is_empty(), "nothing appended");

    // The same when the client's own store hands back a corrupt blob.
    let victim = state3.root_prompt_messages_json[1].clone();
    s.blobs.lock().expect("blobs").insert(victim, b"tampered".to_vec());
    let six = s.turn(&Turn::new("req-r6", "conv-r", "sixth question").with_state(Some(state3))).await;
    let error = six.end.expect("end").error.expect("a Connect error");
    assert!(error.message.contains("does not match its id"), "{}", error.message);
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_a_dropped_run_sse_replays_and_continues_the_unfinished_step() {
    let s = cursor_client::start("").await;
    // Replay: the stream drops mid-answer; re-subscribing gets every frame from the start.
    s.mock.push(Reply::sse(&oa_text_unfinished("half an answer")).hang());
    let run = s.start_run(&Turn::new("req-d1", "conv-d", "hello"), cursor_client::run_everything()).await;
    run.wait_until(|m| m.iter().any(is_text)).await;
    let dropped = run.drop_connection().await;
    let run = s.resubscribe(dropped, cursor_client::run_everything()).await;
    run.cancel().await;
    let seen = run.finish().await;
    assert_eq!(
        seen.updates()[..2],
        [
            interaction_update::Message::StepStarted(agent::StepStartedUpdate { step_id: 1 }),
            interaction_update::Message::TextDelta(agent::TextDeltaUpdate {
                text: "half an answer".into(),
                is_server_notice: false
            })
        ],
        "the re-subscriber gets the replay from the first frame"
    );
    assert_eq!(seen.end, Some(Default::default()));

    // An unfinished step: the model called a tool, the client never answered, the connection
    // dropped. The IDE resumes with a new request and the last checkpoint.
    s.mock.push(Reply::sse(&oa_tools(&[("c-sh", "run_terminal_cmd", json!({"command": "sleep 100"}))])));
    s.mock.push(Reply::sse(&oa_text("Resumed after the interruption.")));
    let policy: cursor_client::Policy = std::sync::Arc::new(|_: &agent::ExecServerMessage| Act::Ignore);
    let run = s.start_run(&Turn::new("req-d2", "conv-d", "run it"), policy).await;
    // The client got the checkpoint naming the pending call.
    let pending = |m: &agent::AgentServerMessage| match &m.message {
        Some(agent_server_message::Message::ConversationCheckpointUpdate(c)) => {
            c.pending_tool_calls.iter().any(|p| p.contains("c-sh")).then(|| c.clone())
        }
        _ => None,
    };
    run.wait_until(|m| m.iter().any(|m| pending(m).is_some())).await;
    let state = run.live_messages().iter().find_map(pending);
    let dropped = run.drop_connection().await;
    let resumed = s.turn(&Turn::new("req-d3", "conv-d", "").with_state(state).resuming()).await;
    assert_eq!(resumed.end, Some(Default::default()));
    assert!(resumed.updates().contains(&interaction_update::Message::TextDelta(agent::TextDeltaUpdate {
        text: "Resumed after the interruption.".into(),
        is_server_notice: false,
    })));
    let body = s.mock.seen().last().expect("request").body.clone();
    let messages = body["messages"].as_array().expect("messages");
    let tool = messages.iter().find(|m| m["role"] == "tool" && m["tool_call_id"] == "c-sh").expect("a result for c-sh");
    assert!(tool.to_string().contains("Interrupted"), "the pending call got an interrupted result: {tool}");
    assert_eq!(messages.last().expect("last")["role"], "tool", "no new user message on resume");
    drop(dropped);

    // A completed conversation: resume does nothing (no provider call, an empty turn_ended).
    let calls = s.mock.seen().len();
    let again = s.turn(&Turn::new("req-d4", "conv-d", "").with_state(resumed.last_checkpoint()).resuming()).await;
    assert_eq!(again.end, Some(Default::default()));
    assert_eq!(again.turn_ended(), Some(agent::TurnEndedUpdate::default()));
    assert_eq!(s.mock.seen().len(), calls);
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nobody_reads_is_canceled_after_the_grace_period() {
    let s = cursor_client::start("detach_grace = 200").await;
    s.mock.push(Reply::sse(&oa_text_unfinished("still going")).hang());
    let run = s.start_run(&Turn::new("req-g", "conv-g", "hello"), cursor_client::run_everything()).await;
    run.wait_until(|m| m.iter().any(is_text)).await;
    drop(run.drop_connection().await);
    // The engine notices the closed stream (at the latest on its next heartbeat), waits the grace
    // period, then cancels: the provider call is dropped and the run row says canceled.
    let canceled = async {
        loop {
            let runs = s.te.handle.store.conversation_runs("conv-g").await.expect("runs");
            if runs.first().is_some_and(|r| r.status == keyhaven::model::RunStatus::Canceled) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(cursor_client::TIMEOUT, canceled).await.expect("the orphaned run is canceled");
    let calls = s.te.wait_calls(1).await;
    assert_eq!(calls[0].summary.status, keyhaven::model::CallStatus::Canceled);
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_conversation_stays_under_512_kb_and_restores_in_full() {
    let s = cursor_client::start("").await;
    let big = "0123456789abcdef".repeat(45_000); // 720 000 characters
    s.mock.push(Reply::sse(&oa_text("Earlier answer.")));
    s.mock.push(Reply::sse(&oa_tools(&[("c-big", "write_file", json!({"path": "big.txt", "contents": big}))])));
    s.mock.push(Reply::sse(&oa_text("Written.")));
    let one = s.turn(&Turn::new("req-l1", "conv-l", "hello")).await;
    let two = s.turn(&Turn::new("req-l2", "conv-l", "write it").with_state(one.last_checkpoint())).await;
    assert_eq!(two.end, Some(Default::default()));
    assert_eq!(s.ws.read("big.txt").as_deref(), Some(big.as_str()));
    let states = two.checkpoints();
    assert_eq!(states.len(), 3);
    for st in &states {
        assert!(st.encoded_len() <= MAX_WIRE_BYTES, "a checkpoint of {} bytes", st.encoded_len());
    }
    // The pending call's arguments were abbreviated, nothing else was dropped.
    assert!(states[0].pending_tool_calls[0].contains("[abbreviated]"));
    assert_eq!(states[0].root_prompt_messages_json.len(), 5);
    // The full arguments are in the blobs: a fresh engine restores them.
    let last = two.last_checkpoint();
    let s = s.fresh_data_dir().await;
    s.mock.push(Reply::sse(&oa_text("Done.")));
    let three = s.turn(&Turn::new("req-l3", "conv-l", "thanks").with_state(last)).await;
    assert_eq!(three.end, Some(Default::default()));
    let body = s.mock.seen().last().expect("request").body.to_string();
    assert!(body.contains(&big), "the provider sees the full 720 KB argument again");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_acknowledges_blobs_gets_no_checkpoint_and_the_turn_still_ends() {
    let mut s = cursor_client::start("blob_ack_timeout = 300").await;
    s.kv = Kv::Ignore;
    s.ws.write("a.txt", "alpha\n");
    s.mock.push(Reply::sse(&oa_tools(&[("c-read", "read_file", json!({"path": "a.txt"}))])));
    s.mock.push(Reply::sse(&oa_text("It says alpha.")));
    let seen = s.turn(&Turn::new("req-nk", "conv-nk", "what is in a.txt?")).await;
    assert_eq!(seen.end, Some(Default::default()));
    assert!(seen.turn_ended().is_some());
    assert!(seen.checkpoints().is_empty(), "nothing is published without acknowledgements");
    let sets: Vec<&String> = seen.kv_log.iter().filter(|l| l.starts_with("set ")).collect();
    assert!(!sets.is_empty());
    let distinct: HashSet<&String> = sets.iter().copied().collect();
    assert_eq!(distinct.len(), sets.len(), "after the first timeout the turn's later checkpoints are not attempted");
    s.te.stop().await;
}

fn appended(msgs: &[agent::AgentServerMessage], message_id: &str) -> bool {
    msgs.iter().any(|m| {
        matches!(&m.message, Some(agent_server_message::Message::InteractionUpdate(agent::InteractionUpdate {
            message: Some(interaction_update::Message::UserMessageAppended(u))
        })) if u.user_message.as_ref().is_some_and(|u| u.message_id == message_id))
    })
}

/// How many provider messages of the request carry exactly `text`.
fn count_text(body: &Value, text: &str) -> usize {
    body["messages"].as_array().expect("messages").iter().filter(|m| m["content"] == text).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_messages_survive_an_engine_restart_and_reach_the_next_run_exactly_once() {
    let s = cursor_client::start("").await;
    // A follow-up is accepted while the model answers, then the user stops the run: the run
    // never took the follow-up, so it waits for the next run.
    s.mock.push(Reply::sse(&oa_text_unfinished("half an answer")).hang());
    let run = s.start_run(&Turn::new("req-p1", "conv-p", "first question"), cursor_client::run_everything()).await;
    run.wait_until(|m| m.iter().any(is_text)).await;
    run.user_message("m-late", "also this", false).await;
    run.wait_until(|m| appended(m, "m-late")).await;
    run.cancel().await;
    let one = run.finish().await;
    assert_eq!(one.end, Some(Default::default()));
    s.te.handle.store.flush().await.expect("flush");
    let stored = s.te.handle.store.pending_messages("conv-p").await.expect("pending");
    assert_eq!(stored.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), vec!["user:m-late"]);

    // The engine restarts (same database): the next run opens with the pending message.
    let s = s.restart().await;
    s.mock.push(Reply::sse(&oa_text("Both answered.")));
    let two = s.turn(&Turn::new("req-p2", "conv-p", "next question").with_state(one.last_checkpoint())).await;
    assert_eq!(two.end, Some(Default::default()));
    let body = s.mock.seen().last().expect("request").body.clone();
    assert_eq!(count_text(&body, "also this"), 1, "the pending message, once: {body}");
    let contents: Vec<String> = texts(&body);
    let late = contents.iter().position(|t| t.contains("also this")).expect("pending");
    assert_eq!(contents.last().map(String::as_str), Some("\"next question\""));
    assert!(late < contents.len() - 1, "ahead of the run's own message");
    s.te.handle.store.flush().await.expect("flush");
    assert!(s.te.handle.store.pending_messages("conv-p").await.expect("pending").is_empty(), "delivered");

    // Once delivered it is transcript, not pending: another restart does not add it again.
    let s = s.restart().await;
    s.mock.push(Reply::sse(&oa_text("Third.")));
    let three = s.turn(&Turn::new("req-p3", "conv-p", "third question").with_state(two.last_checkpoint())).await;
    assert_eq!(three.end, Some(Default::default()));
    let body = s.mock.seen().last().expect("request").body.clone();
    assert_eq!(count_text(&body, "also this"), 1, "{body}");
    s.te.stop().await;
}

/// The ids (hex) of the blobs the server sent with `set_blob_args` during a turn.
fn sets(seen: &Seen) -> HashSet<String> {
    seen.kv_log.iter().filter_map(|l| l.strip_prefix("set ")).map(str::to_owned).collect()
}

/// Every blob a state references, read from the client's store (panics when one is missing).
fn assert_client_holds(s: &CursorSim, state: &agent::ConversationStateStructure) {
    let store = s.blobs.lock().expect("blobs");
    for id in state.root_prompt_messages_json.iter().chain(&state.turns) {
        let data = store.get(id).expect("the client holds every referenced blob");
        if let Ok(agent::ConversationTurnStructure {
            turn: Some(agent::conversation_turn_structure::Turn::AgentConversationTurn(t)),
        }) = agent::ConversationTurnStructure::decode(data.as_slice())
        {
            for child in std::iter::once(&t.user_message).chain(&t.steps) {
                assert!(store.contains_key(child), "the client holds the turn's user message and steps");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_blobs_survive_a_restart_and_are_trusted_only_while_the_client_references_them() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_text("First answer.")));
    let one = s.turn(&Turn::new("req-k1", "conv-k", "first question")).await;
    let state1 = one.last_checkpoint().expect("checkpoint");
    let sent1 = sets(&one);
    assert!(!sent1.is_empty());
    s.te.handle.store.flush().await.expect("flush");
    let stored = s.te.handle.store.acked_blobs("conv-k").await.expect("acked");
    let stored: HashSet<String> = stored.iter().map(hex::encode).collect();
    assert_eq!(stored, sent1, "the blobs of the acknowledged checkpoint are stored");

    // Restart; the client sends its checkpoint back: what it references is not sent again.
    let s = s.restart().await;
    s.mock.push(Reply::sse(&oa_text("Second answer.")));
    let two = s.turn(&Turn::new("req-k2", "conv-k", "second question").with_state(Some(state1))).await;
    assert_eq!(two.end, Some(Default::default()));
    let sent2 = sets(&two);
    assert!(!sent2.is_empty(), "the new turn's blobs are sent");
    assert!(
        sent2.is_disjoint(&sent1),
        "nothing the client still holds is sent again: {:?}",
        sent2.intersection(&sent1)
    );
    let state2 = two.last_checkpoint().expect("checkpoint");
    assert_client_holds(&s, &state2);

    // Restart; the IDE lost its storage meanwhile (no checkpoint, no blobs): every blob the
    // checkpoint references is sent again, so the client can resume from it.
    let s = s.restart().await;
    s.blobs.lock().expect("blobs").clear();
    s.mock.push(Reply::sse(&oa_text("Third answer.")));
    let three = s.turn(&Turn::new("req-k3", "conv-k", "third question")).await;
    assert_eq!(three.end, Some(Default::default()));
    let sent3 = sets(&three);
    assert!(sent1.is_subset(&sent3), "the old blobs are sent again");
    let state3 = three.last_checkpoint().expect("checkpoint");
    assert_client_holds(&s, &state3);
    assert_eq!(s.roots(&state3).len(), 7, "system and three questions with their answers");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todos_written_during_a_turn_are_in_that_turns_checkpoints() {
    let s = cursor_client::start("").await;
    s.mock.push(Reply::sse(&oa_tools(&[(
        "c-todo",
        "todo_write",
        json!({"todos": [{"id": "1", "content": "fix lints", "status": "in_progress"}]}),
    )])));
    s.mock.push(Reply::sse(&oa_text("Planned.")));
    let seen = s.turn(&Turn::new("req-t1", "conv-t", "plan it")).await;
    assert_eq!(seen.end, Some(Default::default()));
    let states = seen.checkpoints();
    assert_eq!(states.len(), 3, "tool round started, its results, final");
    let todos = |st: &agent::ConversationStateStructure| -> Vec<String> {
        st.todos.iter().map(|t| agent::TodoItem::decode(t.as_slice()).expect("todo").content).collect()
    };
    assert!(todos(&states[0]).is_empty(), "before the tool ran the list was empty");
    assert_eq!(todos(&states[1]), vec!["fix lints"], "the tool round's checkpoint has the new list");
    assert_eq!(todos(&states[2]), vec!["fix lints"], "and the final one");
    // After a restart the engine has the list from its stored checkpoint, also when the client
    // sends no state at all.
    let s = s.restart().await;
    s.mock.push(Reply::sse(&oa_text("Still planned.")));
    let two = s.turn(&Turn::new("req-t2", "conv-t", "go on")).await;
    assert_eq!(todos(&two.last_checkpoint().expect("checkpoint")), vec!["fix lints"]);
    // And with the client's state as well (the same list, not doubled).
    let s = s.restart().await;
    s.mock.push(Reply::sse(&oa_text("Still planned.")));
    let three = s.turn(&Turn::new("req-t3", "conv-t", "go on").with_state(two.last_checkpoint())).await;
    assert_eq!(todos(&three.last_checkpoint().expect("checkpoint")), vec!["fix lints"]);
    s.te.stop().await;
}
