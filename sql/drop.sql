--
-- drop: DROP EXTENSION never destroys the deduplication history silently.
-- Without CASCADE it is refused while entries exist (2BP01); with CASCADE
-- it goes ahead, with a WARNING.  Runs last: it drops the extension.
--
SELECT inbox_claim('drop-test', 'kept-1');
SELECT count(*) > 0 AS has_entries FROM inbox.entries;
DROP EXTENSION inbox;
DROP EXTENSION IF EXISTS inbox;
DROP EXTENSION IF EXISTS no_such_extension, inbox;
SELECT count(*) > 0 AS still_there FROM inbox.entries;

-- Other DROP EXTENSION commands are not affected.
CREATE EXTENSION pg_prewarm;
DROP EXTENSION pg_prewarm;

-- Inside a transaction, as a statement of its own (regress.try catches it).
BEGIN;
SELECT inbox_claim('drop-test', 'in-tx');
SELECT regress.try('DROP EXTENSION inbox');
ROLLBACK;

-- The deliberate way: CASCADE, with a warning that says what goes.
DROP EXTENSION inbox CASCADE;
SELECT count(*) AS schemas_left FROM pg_namespace WHERE nspname = 'inbox';

-- An inbox without entries drops without a word.
CREATE EXTENSION inbox;
DROP EXTENSION inbox;
