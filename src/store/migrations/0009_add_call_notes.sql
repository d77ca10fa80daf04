-- What Keyhaven changed about a call that the user should know: a JSON list of short
-- human-readable notes (e.g. a server tool the upstream cannot run, left out of the request).
-- NULL when there is nothing to say.
ALTER TABLE calls ADD COLUMN notes TEXT;
