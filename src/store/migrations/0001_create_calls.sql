-- One row per gateway call: written in flight at start, completed at finish.
CREATE TABLE calls (
    id TEXT PRIMARY KEY NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER,
    status TEXT NOT NULL,
    dialect TEXT NOT NULL DEFAULT '',
    client TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    model_id TEXT,
    provider TEXT,
    upstream_model TEXT,
    stream INTEGER NOT NULL DEFAULT 0,
    http_status INTEGER,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    usage_estimated INTEGER NOT NULL DEFAULT 0,
    cost_micros INTEGER,
    price_version TEXT,
    ttft_ms INTEGER,
    total_ms INTEGER,
    retries INTEGER NOT NULL DEFAULT 0,
    error_kind TEXT,
    error_message TEXT,
    request_body TEXT,
    response_body TEXT,
    process_epoch INTEGER
) STRICT;

CREATE INDEX calls_started_ms ON calls (started_ms);
CREATE INDEX calls_model ON calls (model, started_ms);
CREATE INDEX calls_status ON calls (status, started_ms);
