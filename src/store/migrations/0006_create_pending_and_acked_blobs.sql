-- Conversation state a front end keeps between runs (Cursor: `cursor::conversation`).
--
-- Messages a run left for the next run of its conversation (e.g. a follow-up inserted into a run
-- that was canceled before it could take it), in delivery order. A row goes away in the same
-- transaction that appends a message with its id to the conversation, so a crash never loses
-- one and never delivers one twice; rows whose id the transcript already holds are not pending.
CREATE TABLE pending_messages (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, message_id)
) STRICT;

CREATE INDEX pending_messages_order ON pending_messages (conversation_id, position);

-- Content-addressed blobs (32-byte ids) the client acknowledged for a conversation: those of the
-- latest checkpoint it accepted. What the front end trusts them for is its decision (Cursor:
-- only when the client's next request shows it still holds them).
CREATE TABLE acked_blobs (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    blob_id BLOB NOT NULL,
    acked_ms INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, blob_id)
) STRICT, WITHOUT ROWID;
