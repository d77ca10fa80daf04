-- The gateway's copy of the reasoning before each tool call (provider::memory), so a client that
-- replays a tool turn without it after a restart still gets it restored. `parts` is the canonical
-- reasoning parts as JSON. Rows older than the memory's lifetime are deleted as new ones arrive.
CREATE TABLE reasoning_memory (
    tool_call_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    parts TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (tool_call_id, provider)
);
CREATE INDEX reasoning_memory_created ON reasoning_memory (created_ms);
