-- Agent transcripts (the agent loop, `run`): conversations, their runs and tool rounds, the
-- append-only message log (idempotent by message id) and checkpoints.
CREATE TABLE conversations (
    id TEXT PRIMARY KEY NOT NULL,
    client TEXT NOT NULL DEFAULT '',
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    model TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER,
    steps INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    error_kind TEXT,
    error_message TEXT,
    process_epoch INTEGER
) STRICT;

CREATE INDEX runs_conversation ON runs (conversation_id, started_ms);
CREATE INDEX runs_status ON runs (status);

CREATE TABLE tool_rounds (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    calls INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (run_id, step)
) STRICT;

-- `content` is the canonical message (model::Message) as JSON. Rows are only ever appended.
CREATE TABLE messages (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    run_id TEXT,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq),
    UNIQUE (conversation_id, message_id)
) STRICT;

-- A checkpoint covers the first `seq` messages; `state` is versioned (`version`) and must stay
-- readable by later builds.
CREATE TABLE checkpoints (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    run_id TEXT,
    version INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) STRICT;
