-- The cheaper model or group a budget sent a call to (`[[budgets]] on_limit = "downgrade"`);
-- `model` stays what the client asked for.
ALTER TABLE calls ADD COLUMN budget_downgrade TEXT;
