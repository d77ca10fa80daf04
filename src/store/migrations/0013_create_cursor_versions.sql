-- The Cursor versions the proxy has seen (the IDE's `x-cursor-client-version`) and the result of
-- the local self-test the update guard ran for each. `test_status` is 'running', 'passed' or
-- 'failed' (NULL: never tested); `failed_step` and `detail` say what failed.
CREATE TABLE cursor_versions (
    version TEXT PRIMARY KEY,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    test_status TEXT,
    failed_step TEXT,
    detail TEXT,
    tested_ms INTEGER
);
