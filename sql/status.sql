--
-- status: inbox_status reports what is recorded for a message
--
SET timezone = 'UTC';

-- Nothing recorded: no row.
SELECT * FROM inbox_status('orders', 'evt-42-created');

-- A committed claim: received time, hash and state.
SELECT inbox_claim('orders', 'evt-42-created', sha256('order 42, 1 unit'));
SELECT received_at <= now() AS received, payload_hash = sha256('order 42, 1 unit') AS same_hash, state
FROM inbox_status('orders', 'evt-42-created');
SELECT pg_typeof(received_at), pg_typeof(payload_hash), pg_typeof(state)
FROM inbox_status('orders', 'evt-42-created');

-- A claim without a hash reports a NULL hash.
SELECT inbox_claim('orders', 'evt-42-cancelled');
SELECT payload_hash IS NULL AS no_hash, state FROM inbox_status('orders', 'evt-42-cancelled');

-- Other scopes and ids are separate.
SELECT count(*) FROM inbox_status('shipping', 'evt-42-created');
SELECT count(*) FROM inbox_status('orders', 'evt-42-CREATED');

-- The claiming transaction sees its own claim; after a rollback it is gone.
BEGIN;
SELECT inbox_claim('orders', 'evt-43-created');
SELECT state FROM inbox_status('orders', 'evt-43-created');
ROLLBACK;
SELECT count(*) FROM inbox_status('orders', 'evt-43-created');

-- The recovery procedure after an uncertain COMMIT (the connection dropped
-- while committing): from a new session, a row means the claim, and so the
-- effect that committed with it, is durable: acknowledge.  No row means not
-- committed *yet*: the old backend may still be finishing.  So the message
-- is processed again through inbox_claim, never skipped on the strength of
-- "no row": the claim waits for the old transaction if it is still running,
-- and returns false if that one committed after all.
SELECT CASE WHEN EXISTS (SELECT FROM inbox_status('orders', 'evt-42-created'))
			THEN 'committed: acknowledge' ELSE 'process again with inbox_claim' END AS outcome;
SELECT CASE WHEN EXISTS (SELECT FROM inbox_status('orders', 'evt-43-created'))
			THEN 'committed: acknowledge' ELSE 'process again with inbox_claim' END AS outcome;

-- Bad input is refused as for inbox_claim.
SELECT regress.try($$SELECT * FROM inbox_status(NULL, 'm')$$);
SELECT regress.try($$SELECT * FROM inbox_status('orders', NULL)$$);
SELECT regress.try($$SELECT * FROM inbox_status('', 'm')$$);
SELECT regress.try($$SELECT * FROM inbox_status('orders', repeat('m', 1025))$$);

-- It can be called in a select list, too.
SELECT (inbox_status('orders', 'evt-42-created')).state;
