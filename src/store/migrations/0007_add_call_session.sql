-- The client's own session a call belongs to (Claude Code's `X-Claude-Code-Session-Id`, Codex's
-- `session_id` header), so one session's calls can be listed and summed together.
ALTER TABLE calls ADD COLUMN session_id TEXT;
CREATE INDEX calls_session ON calls (session_id, started_ms) WHERE session_id IS NOT NULL;
