-- Where each call's usage, and so its cost, came from: 'reported' (the provider's usage),
-- 'computed' (counted locally with the model's own tokenizer), 'estimated' (an approximating
-- tokenizer, or an answer that never completed). NULL: in flight, or nothing to count (the
-- provider never accepted the call; token counts).
ALTER TABLE calls ADD COLUMN cost_source TEXT;

-- Rows written before: estimated when they were flagged so, reported when the provider's usage
-- came back (any tokens); the rest (refused calls, token counts) stay NULL.
UPDATE calls SET cost_source = CASE WHEN usage_estimated = 1 THEN 'estimated' ELSE 'reported' END
WHERE status <> 'in_flight'
  AND (usage_estimated = 1 OR input_tokens + output_tokens + cache_read_tokens + cache_write_tokens > 0);
