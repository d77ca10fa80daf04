-- The context blocks that went into a Cursor run's user message (what the user attached, one row
-- per run: a JSON list of {kind, source, bytes}), shown with each call of the run (its calls carry
-- the run id as `request_id`).
CREATE TABLE run_context_blocks (
    run_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    blocks TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
