//! The call journal on its own: records read back, torn and corrupt tails, segment turns.

use std::sync::Arc;

use crate::model::{CallFinish, CallStart, CallStatus, Usage};
use crate::store::journal::{Entry, Journal, ROTATE_BYTES, decode_all, segment_paths};

fn start(id: &str) -> CallStart {
    CallStart {
        id: id.to_owned(),
        started_ms: 1_735_689_600_000,
        dialect: "anthropic".into(),
        client: "claude-cli/2.0".into(),
        model: "sonnet".into(),
        model_id: Some("0123456789abcdef".into()),
        provider: Some("anthropic".into()),
        upstream_model: Some("claude-sonnet-4-5".into()),
        stream: true,
        request_body: Some("{\"messages\":[]}".into()),
        conversation_id: Some("conv".into()),
        request_id: None,
        session_id: Some("sess".into()),
        budget_downgrade: None,
    }
}

/// The (epoch, id) of each start among `entries`.
fn starts(entries: &[Entry]) -> Vec<(i64, String)> {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::Start { epoch, start } => Some((*epoch, start.id.clone())),
            Entry::Finish { .. } => None,
        })
        .collect()
}

fn open(dir: &tempfile::TempDir) -> (Arc<Journal>, Vec<Entry>) {
    let (journal, replayed) =
        Journal::open(&segment_paths(&dir.path().join("k.db"))).expect("open").expect("not owned");
    (Arc::new(journal), replayed)
}

fn segment_bytes(dir: &tempfile::TempDir) -> [Vec<u8>; 2] {
    segment_paths(&dir.path().join("k.db")).map(|p| std::fs::read(p).expect("read segment"))
}

#[test]
fn appended_starts_are_read_back_without_their_bodies_and_with_the_writers_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, replayed) = open(&dir);
    assert!(replayed.is_empty());
    let held = [
        journal.append_start(7, &mut start("a")).expect("append"),
        journal.append_start(7, &mut start("b")).expect("append"),
    ];
    // Committed or not, the active segment keeps its records until it is retired or cleared: a
    // process killed here leaves both.
    drop(held);
    drop(journal);

    let (_, replayed) = open(&dir);
    assert_eq!(starts(&replayed), [(7, "a".to_owned()), (7, "b".to_owned())]);
    let expected = CallStart { request_body: None, ..start("a") };
    assert_eq!(replayed[0], Entry::Start { epoch: 7, start: expected });
}

#[cfg(unix)]
#[test]
fn segments_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let _journal = open(&dir);
    for path in segment_paths(&dir.path().join("k.db")) {
        let mode = std::fs::metadata(&path).expect("segment").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
}

#[test]
fn a_torn_or_corrupt_tail_ends_the_replay_without_losing_what_came_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, _) = open(&dir);
    drop(journal.append_start(1, &mut start("kept")).expect("append"));
    drop(journal.append_start(1, &mut start("torn")).expect("append"));
    drop(journal);
    let [bytes, _] = segment_bytes(&dir);
    let first_len = 8 + u32::from_le_bytes(bytes[..4].try_into().expect("len")) as usize;

    // Every cut of the second record, and every flipped byte in it, keeps only the first.
    for cut in first_len..bytes.len() {
        assert_eq!(starts(&decode_all(&bytes[..cut])), [(1, "kept".to_owned())], "cut at {cut}");
    }
    for at in first_len..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x20;
        assert_eq!(starts(&decode_all(&flipped)), [(1, "kept".to_owned())], "byte {at} flipped");
    }
    // A length past the cap, zeros (a preallocated tail) and noise are not records.
    let mut huge = bytes[..first_len].to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    huge.extend_from_slice(&[0; 64]);
    assert_eq!(decode_all(&huge).len(), 1);
    assert!(decode_all(&[0; 4096]).is_empty());
    let noise: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    assert!(decode_all(&noise).is_empty());
}

#[test]
fn a_retired_segment_is_emptied_once_its_last_start_is_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, _) = open(&dir);
    let mut first_segment = Vec::new();
    while journal.lens()[0] < ROTATE_BYTES {
        first_segment.push(journal.append_start(1, &mut start("filler")).expect("append"));
    }
    // The next append goes to the other segment; the first stays while one of its starts is held.
    let second = journal.append_start(1, &mut start("next")).expect("append");
    assert!(journal.lens()[1] > 0, "{:?}", journal.lens());
    let last = first_segment.pop().expect("held");
    drop(first_segment);
    assert!(journal.lens()[0] >= ROTATE_BYTES, "emptied while a start was not committed");
    assert!(segment_bytes(&dir)[0].len() as u64 >= ROTATE_BYTES);
    drop(last);
    assert_eq!(journal.lens()[0], 0);
    assert!(segment_bytes(&dir)[0].is_empty());
    // The active segment is never emptied under its appends, committed or not.
    drop(second);
    assert!(journal.lens()[1] > 0);
    drop(journal);
    let (_, replayed) = open(&dir);
    assert_eq!(starts(&replayed), [(1, "next".to_owned())]);
}

#[test]
fn appends_turn_back_to_the_first_segment_only_once_it_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, _) = open(&dir);
    let held_first = journal.append_start(1, &mut start("pinned")).expect("append");
    while journal.lens()[0] < ROTATE_BYTES {
        drop(journal.append_start(1, &mut start("filler")).expect("append"));
    }
    while journal.lens()[1] < ROTATE_BYTES {
        drop(journal.append_start(1, &mut start("filler")).expect("append"));
    }
    // The first segment still holds an uncommitted start: appends stay on the second.
    drop(journal.append_start(1, &mut start("overflow")).expect("append"));
    assert!(journal.lens()[1] > ROTATE_BYTES);
    drop(held_first);
    assert_eq!(journal.lens()[0], 0);
    drop(journal.append_start(1, &mut start("back")).expect("append"));
    assert!(journal.lens()[0] > 0, "{:?}", journal.lens());
}

#[test]
fn clear_empties_both_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, _) = open(&dir);
    drop(journal.append_start(1, &mut start("a")).expect("append"));
    journal.clear().expect("clear");
    assert_eq!(journal.lens(), [0, 0]);
    assert!(segment_bytes(&dir).iter().all(Vec::is_empty));
    // Appends after a clear are read back as usual.
    drop(journal.append_start(2, &mut start("b")).expect("append"));
    drop(journal);
    let (_, replayed) = open(&dir);
    assert_eq!(starts(&replayed), [(2, "b".to_owned())]);
}

#[test]
fn one_process_owns_the_journal_and_a_second_opener_leaves_it_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = segment_paths(&dir.path().join("k.db"));
    let (journal, _) = open(&dir);
    drop(journal.append_start(1, &mut start("live")).expect("append"));
    // Another open file description (another process: the command line while the engine runs).
    assert!(Journal::open(&paths).expect("open").is_none());
    assert_eq!(segment_bytes(&dir)[0].len() as u64, journal.lens()[0], "the owner's records are untouched");
    drop(journal);
    // The owner gone (its lock goes with its process), the next opener replays.
    let (_, replayed) = open(&dir);
    assert_eq!(replayed.len(), 1);
}

#[test]
fn finishes_are_read_back_in_order_without_their_bodies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, _) = open(&dir);
    let finish = CallFinish {
        id: "a".into(),
        finished_ms: 1_735_689_600_500,
        status: CallStatus::Ok,
        http_status: Some(200),
        usage: Usage { input_tokens: 10, output_tokens: 20, ..Usage::default() },
        usage_estimated: false,
        cost_micros: Some(123),
        price_version: Some("2026-12-01".into()),
        cost_source: None,
        ttft_ms: Some(5),
        total_ms: 500,
        retries: 0,
        error_kind: None,
        error_message: None,
        request_body: Some("{\"secret-ish\":1}".into()),
        response_body: Some("{\"answer\":1}".into()),
        model_id: None,
        provider: None,
        upstream_model: None,
        notes: Vec::new(),
    };
    drop(journal.append_start(3, &mut start("a")).expect("append"));
    drop(journal.append_finish(&mut finish.clone()).expect("append"));
    drop(journal);
    let (_, replayed) = open(&dir);
    let expected = CallFinish { request_body: None, response_body: None, ..finish };
    assert_eq!(replayed.len(), 2);
    assert_eq!(replayed[1], Entry::Finish { finish: expected });
    let text = String::from_utf8(segment_bytes(&dir)[0].clone()).unwrap_or_default();
    assert!(!text.contains("answer") && !text.contains("messages"), "a body reached the journal");
}
