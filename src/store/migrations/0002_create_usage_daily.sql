-- Per-day rollup of finished calls, updated in the same transaction as each finish. Survives
-- pruning of `calls`. Key columns use '' for "unknown", never NULL.
CREATE TABLE usage_daily (
    day TEXT NOT NULL,
    model TEXT NOT NULL,
    provider TEXT NOT NULL,
    client TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros INTEGER NOT NULL DEFAULT 0,
    total_ms_sum INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, model, provider, client)
) STRICT, WITHOUT ROWID;
