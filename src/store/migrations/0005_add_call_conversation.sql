-- The front end's conversation and request a call served (e.g. Cursor's conversation id and the
-- agent stream's request id), so a conversation's calls can be listed together.
ALTER TABLE calls ADD COLUMN conversation_id TEXT;
ALTER TABLE calls ADD COLUMN request_id TEXT;
CREATE INDEX calls_conversation ON calls (conversation_id, started_ms) WHERE conversation_id IS NOT NULL;
