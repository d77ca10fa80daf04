-- Per-day latency histogram of finished calls (total_ms), updated in the same transaction as
-- each finish, so percentiles never scan `calls`. `bucket` indexes `store::LATENCY_BOUNDS_MS`
-- (the last bucket is everything above the largest bound). Calls without a duration
-- (interrupted) are not counted.
CREATE TABLE latency_daily (
    day TEXT NOT NULL,
    model TEXT NOT NULL,
    provider TEXT NOT NULL,
    client TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, model, provider, client, bucket)
) STRICT, WITHOUT ROWID;
