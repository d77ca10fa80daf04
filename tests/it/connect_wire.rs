//! Connect-RPC on Cursor's agent wire, end to end through the proxy and the local CA (the
//! `cursor_sim` harness): exact frame sequences of plain and thinking turns over RunSSE +
//! BidiAppend and over one h2 bidi `Run` connection (full duplex, cancel on the same stream);
//! BidiAppend seqnos out of order, duplicated, with gaps filled late or never, gzip; RunSSE
//! without a run request; malformed, truncated and oversized envelopes and protobuf; unknown
//! oneof cases; provider errors mapped to Cursor's error kinds; the cancel action stopping the
//! provider call. Every case ends in a defined Connect answer, never a hang or a crash.

use std::time::Duration;

use http::StatusCode;
use http_body_util::BodyExt;
use keyhaven::config::RoutingMode;
use keyhaven::cursor::protocol::agent::interaction_update;
use keyhaven::cursor::protocol::aiserver;
use keyhaven::cursor::protocol::connect::{self, Code, EndStream};
use prost::Message;

use crate::cursor_sim::*;
use crate::support::fixtures::{Case, upstream_sse};
use crate::support::{CANARY_KEY, Reply, Up};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_plain_and_thinking_turns_stream_the_exact_frames() {
    let s = sim().await;
    for mode in [RoutingMode::Local, RoutingMode::Hybrid] {
        s.set_mode(mode);
        let id = format!("req-plain-{}", mode.as_str());
        s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
        // RunSSE first; the heartbeat (seq 1) arrives before the run request (seq 0), then again.
        let sse = s.run_sse_task(&id, false);
        s.append(&id, 1, &HEARTBEAT).await;
        s.append(&id, 0, &run_request("oa-model", "hi")).await;
        s.append(&id, 1, &HEARTBEAT).await;
        let (got, end) = FrameReader::new(ok_sse(sse.await.expect("RunSSE"))).rest().await;
        assert_eq!(got, plain_turn(), "{mode:?}");
        assert_eq!(end, EndStream::default(), "success end-stream is {{}}");
        // An append for the finished run still gets its 200.
        s.append(&id, 2, &HEARTBEAT).await;

        // A thinking turn: appends before RunSSE this time.
        let id = format!("req-think-{}", mode.as_str());
        s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Thinking)));
        s.append(&id, 0, &run_request("oa-model", "2+2?")).await;
        let (got, end) = FrameReader::new(s.run_sse(&id).await).rest().await;
        assert_thinking_turn(&got);
        assert_eq!(end, EndStream::default());
    }
    let calls = s.te.wait_calls(4).await;
    assert!(calls.iter().all(|c| c.summary.client == "cursor" && c.summary.model == "oa-model"), "{calls:?}");
    assert!(s.seen.lock().expect("seen").is_empty(), "nothing went to the official host");
    s.settled(true).await;
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_h2_run_is_full_duplex_with_exact_frames_and_cancel() {
    let s = sim().await;
    for mode in [RoutingMode::Local, RoutingMode::Hybrid] {
        s.set_mode(mode);
        // One h2 connection carries every turn, as the IDE's agent connection does.
        let mut h2 = s.h2().await;
        s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)).delay(Duration::from_millis(50)));
        // The run request, then heartbeats while the answer streams; the request side stays open.
        let (tx, resp) = s.run_h2(&mut h2, connect::encode_envelope(&run_request("oa-model", "hi"), false)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers().get("content-type").expect("ct"), "application/connect+proto");
        let mut frames = FrameReader::new(resp);
        assert_eq!(frames.next().await, Out::Update(Box::new(step(1))), "{mode:?}");
        assert_eq!(frames.next().await, Out::Update(Box::new(text("Hello"))), "{mode:?}");
        // (Once the run has ended the server lets go of the request side, so a late send may fail.)
        let _ = tx.send(connect::encode_envelope(&HEARTBEAT, false));
        let (rest, end) = frames.rest().await;
        assert_eq!(rest, plain_turn()[2..], "{mode:?}");
        assert_eq!(end, EndStream::default());
        drop(tx);

        // The thinking turn, its request frame gzip-compressed (flag 0x01).
        s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Thinking)));
        let (tx, resp) = s.run_h2(&mut h2, connect::encode_envelope(&run_request("oa-model", "2+2?"), true)).await;
        let (got, end) = FrameReader::new(resp).rest().await;
        assert_thinking_turn(&got);
        assert_eq!(end, EndStream::default());
        drop(tx);

        // A turn canceled on its own stream while the provider is still answering.
        s.mock.push(hanging_text());
        let (tx, resp) = s.run_h2(&mut h2, connect::encode_envelope(&run_request("oa-model", "hi"), false)).await;
        let mut frames = FrameReader::new(resp);
        assert_eq!(frames.next().await, Out::Update(Box::new(step(1))));
        assert_eq!(frames.next().await, Out::Update(Box::new(text("Hello"))));
        tx.send(connect::encode_envelope(&cancel("user_stopped_generation"), false)).expect("send");
        let (rest, end) = frames.rest().await;
        assert!(matches!(rest.last(), Some(interaction_update::Message::TurnEnded(_))), "{rest:?}");
        assert_eq!(end, EndStream::default());
        // The client keeps its request side open: the run's end still releases the stream.
        s.settled(false).await;
        drop(tx);
    }
    let calls = s.te.wait_calls(6).await;
    let canceled = calls.iter().filter(|c| c.summary.status == keyhaven::model::CallStatus::Canceled).count();
    assert_eq!(canceled, 2, "{calls:?}");
    assert!(s.seen.lock().expect("seen").is_empty(), "nothing went to the official host");
    s.settled(true).await;
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_seqno_gaps_duplicates_and_gzip_are_delivered_in_order() {
    let s = sim().await;
    // A gap later filled: the cancel (seq 2) waits behind seq 1, so the answer streams on until
    // seq 1 arrives; only then does the cancel end the turn.
    s.mock.push(hanging_text());
    s.append("r-gap", 0, &run_request("oa-model", "hi")).await;
    s.append("r-gap", 2, &cancel("user_stopped_generation")).await;
    let mut frames = FrameReader::new(s.run_sse("r-gap").await);
    for want in [step(1), text("Hello"), tokens(2), text(" world"), tokens(2)] {
        assert_eq!(frames.next().await, Out::Update(Box::new(want)), "the cancel behind the gap is not applied yet");
    }
    s.append("r-gap", 1, &HEARTBEAT).await;
    let (rest, end) = frames.rest().await;
    assert!(matches!(rest.as_slice(), [interaction_update::Message::TurnEnded(_)]), "{rest:?}");
    assert_eq!(end, EndStream::default());

    // Duplicates: the run request twice, a heartbeat twice: one provider call, one turn.
    let before = s.mock.seen().len();
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let sse = s.run_sse_task("r-dup", false);
    s.append("r-dup", 0, &run_request("oa-model", "hi")).await;
    s.append("r-dup", 0, &run_request("oa-model", "hi")).await;
    s.append("r-dup", 1, &HEARTBEAT).await;
    s.append("r-dup", 1, &HEARTBEAT).await;
    let (got, end) = FrameReader::new(ok_sse(sse.await.expect("RunSSE"))).rest().await;
    assert_eq!(got, plain_turn());
    assert_eq!(end, EndStream::default());
    assert_eq!(s.mock.seen().len(), before + 1, "one provider call for a duplicated run request");

    // gzip everywhere: a compressed RunSSE envelope and gzip BidiAppend bodies.
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let sse = s.run_sse_task("r-gzip", true);
    s.append_gzip("r-gzip", 1, &HEARTBEAT).await;
    s.append_gzip("r-gzip", 0, &run_request("oa-model", "hi")).await;
    let (got, end) = FrameReader::new(ok_sse(sse.await.expect("RunSSE"))).rest().await;
    assert_eq!(got, plain_turn());
    assert_eq!(end, EndStream::default());
    s.settled(true).await;
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_unfilled_gaps_and_missing_run_requests_end_with_defined_answers() {
    // Short waits from the config: a gap is skipped, a stream without a run request ends.
    let s =
        sim_with("[proxy]\nmode = \"local\"\n[cursor]\nlinger = 100\ngap_wait = 200\nfirst_message_wait = 300\n", "")
            .await;
    // A gap never filled: after gap_wait the cancel behind it is delivered.
    s.mock.push(hanging_text());
    s.append("r-hole", 0, &run_request("oa-model", "hi")).await;
    s.append("r-hole", 2, &cancel("user_stopped_generation")).await;
    let (got, end) = FrameReader::new(s.run_sse("r-hole").await).rest().await;
    assert!(matches!(got.last(), Some(interaction_update::Message::TurnEnded(_))), "{got:?}");
    assert_eq!(end, EndStream::default());
    let call = s.te.only_call().await;
    assert_eq!(call.summary.status, keyhaven::model::CallStatus::Canceled);

    // RunSSE and no append at all, in both modes: a deadline_exceeded error with Cursor's
    // ErrorDetails (heartbeats meanwhile), never a hang.
    for mode in [RoutingMode::Local, RoutingMode::Hybrid] {
        s.set_mode(mode);
        let id = format!("r-silent-{}", mode.as_str());
        let (got, end) = FrameReader::new(s.run_sse(&id).await).rest().await;
        assert!(got.is_empty(), "{got:?}");
        let err = end.error.expect("an error end-stream");
        assert_eq!(err.code, Code::DeadlineExceeded, "{mode:?}");
        let details = err.cursor_details().expect("ErrorDetails");
        assert_eq!(details.error, aiserver::error_details::Error::Timeout as i32);
    }
    // Appends for a stream whose RunSSE never comes: the placeholder expires.
    s.append("r-orphan", 3, &HEARTBEAT).await;
    s.settled(true).await;
    assert_eq!(s.mock.seen().len(), 1, "only the first case reached the provider");
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_wire_robustness_has_defined_answers() {
    let s = sim().await;
    let bad_hex = aiserver::BidiAppendRequest {
        data: "zz".into(),
        request_id: Some(aiserver::BidiRequestId { request_id: "r-bad".into() }),
        append_seqno: 0,
        data_binary: Vec::new(),
    }
    .encode_to_vec();
    let gz = [("content-type", "application/proto"), ("content-encoding", "gzip")];
    for (body, headers) in
        [(bad_hex, &gz[..1]), (vec![0xff, 0x01, 0x02], &gz[..1]), (vec![1, 2, 3, 4], &gz[..]), (Vec::new(), &gz[..1])]
    {
        let resp = s.send("/aiserver.v1.BidiService/BidiAppend", headers, body).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.into_body().collect().await.expect("body").to_bytes().is_empty());
    }
    // An unknown request id: 200, empty.
    s.append("never-opened", 5, &HEARTBEAT).await;
    // Truncated and wrongly sized RunSSE envelopes: an error end-stream, not a hang or a crash.
    for body in [vec![0, 0, 0], vec![0, 0, 0, 0, 50, 1, 2], vec![0, 0xff, 0xff, 0xff, 0xff]] {
        let resp =
            s.send("/agent.v1.AgentService/RunSSE", &[("content-type", "application/connect+proto")], body).await;
        let (msgs, end) = read_frames(resp).await;
        assert!(msgs.is_empty());
        assert_eq!(end.error.expect("error").code, Code::InvalidArgument);
    }
    // Invalid protobuf as the run request, and an unknown model: Connect errors with details.
    let resp = s.run_sse("r-garbage").await;
    s.append("r-garbage", 0, &[0x0a, 0x03, 0xff, 0xff, 0xff]).await;
    let (_, end) = read_frames(resp).await;
    assert_eq!(end.error.expect("error").code, Code::InvalidArgument);
    let resp = s.run_sse("r-model").await;
    s.append("r-model", 0, &run_request("no-such-model", "hi")).await;
    let (_, end) = read_frames(resp).await;
    let err = end.error.expect("error");
    assert_eq!(err.code, Code::NotFound);
    let details = err.cursor_details().expect("ErrorDetails");
    assert_eq!(details.error, aiserver::error_details::Error::BadModelName as i32);
    // An unknown oneof case (field 60, which no build defines) as the first message: a bad
    // request; the same case in the middle of a run is skipped and the turn completes.
    let unknown_case = [0xe2, 0x03, 0x02, 0x08, 0x01];
    let resp = s.run_sse("r-oneof").await;
    s.append("r-oneof", 0, &unknown_case).await;
    let (_, end) = read_frames(resp).await;
    assert_eq!(end.error.expect("error").code, Code::InvalidArgument);
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)));
    let resp = s.run_sse("r-oneof-mid").await;
    s.append("r-oneof-mid", 1, &unknown_case).await;
    s.append("r-oneof-mid", 2, &[0x0a, 0xff]).await;
    s.append("r-oneof-mid", 0, &run_request("oa-model", "hi")).await;
    let (got, end) = FrameReader::new(resp).rest().await;
    assert_eq!(got, plain_turn());
    assert_eq!(end, EndStream::default());
    // A provider failure: a readable Cursor error.
    s.mock.push(Reply::json(500, r#"{"error":{"message":"boom","type":"server_error"}}"#));
    let resp = s.run_sse("r-fail").await;
    s.append("r-fail", 0, &run_request("oa-model", "hi")).await;
    let (_, end) = read_frames(resp).await;
    let err = end.error.expect("error");
    assert_eq!(err.code, Code::Unavailable);
    assert!(err.message.contains("boom"), "{err:?}");
    s.settled(true).await;
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_provider_errors_map_to_cursor_error_kinds() {
    let s = sim().await;
    let cases = [
        (
            429,
            r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
            Code::ResourceExhausted,
            aiserver::error_details::Error::RateLimited,
        ),
        (
            401,
            r#"{"error":{"message":"bad key","type":"invalid_request_error"}}"#,
            Code::FailedPrecondition,
            aiserver::error_details::Error::BadUserApiKey,
        ),
        (
            400,
            r#"{"error":{"message":"maximum context length exceeded","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            Code::InvalidArgument,
            aiserver::error_details::Error::BadRequest,
        ),
    ];
    for (i, (status, body, code, kind)) in cases.into_iter().enumerate() {
        // Retries are exhausted on the same answer (the latest reply repeats).
        s.mock.push(Reply::json(status, body));
        let id = format!("r-err-{i}");
        s.append(&id, 0, &run_request("oa-model", "hi")).await;
        let (got, end) = FrameReader::new(s.run_sse(&id).await).rest().await;
        assert_eq!(got, vec![step(1)], "the step began; no answer followed");
        let err = end.error.expect("an error end-stream");
        assert_eq!(err.code, code, "HTTP {status}");
        assert_eq!(err.cursor_details().expect("ErrorDetails").error, kind as i32, "HTTP {status}");
        assert!(!err.message.contains(CANARY_KEY));
    }
    s.settled(true).await;
    s.te.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_cancel_action_stops_the_provider_call() {
    let s = sim().await;
    s.mock.push(Reply::sse(&upstream_sse(Up::Openai, Case::Text)).delay(Duration::from_millis(300)).hang());
    let resp = s.run_sse("r-cancel").await;
    s.append("r-cancel", 0, &run_request("oa-model", "hi")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.append("r-cancel", 1, &cancel("user_stopped_generation")).await;
    let (msgs, end) = read_frames(resp).await;
    assert!(matches!(msgs.last().map(update), Some(interaction_update::Message::TurnEnded(_))), "{msgs:?}");
    assert_eq!(end, connect::EndStream::default());
    let call = s.te.only_call().await;
    assert_eq!(call.summary.status, keyhaven::model::CallStatus::Canceled);
    // The turn's call row names Cursor, its conversation and its agent stream.
    assert_eq!(call.summary.client, "cursor");
    assert_eq!(call.summary.conversation_id.as_deref(), Some("conv-1"));
    assert_eq!(call.summary.request_id.as_deref(), Some("r-cancel"));
    s.settled(true).await;
    s.te.stop().await;
}
