-- Budget alerts (issue 17): each budget crosses its soft threshold and its limit at most once per
-- period; a row here says the alert was raised, so a restart does not raise it again.
CREATE TABLE budget_alerts (
    budget          TEXT    NOT NULL,
    period_start_ms INTEGER NOT NULL,
    level           TEXT    NOT NULL CHECK (level IN ('soft', 'hard')),
    reset_ms        INTEGER NOT NULL,
    spent_micros    INTEGER NOT NULL,
    limit_micros    INTEGER NOT NULL,
    at_ms           INTEGER NOT NULL,
    PRIMARY KEY (budget, period_start_ms, level)
) WITHOUT ROWID;
