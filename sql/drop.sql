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

-- DROP OWNED BY the extension's owner would drop it too: the same rules.
CREATE ROLE inbox_regress_dba SUPERUSER;
CREATE ROLE inbox_regress_nobody;
CREATE SCHEMA app_inbox;
SET ROLE inbox_regress_dba;
CREATE EXTENSION inbox SCHEMA app_inbox;
SELECT app_inbox.inbox_claim('drop-test', 'kept-2');
RESET ROLE;
DROP OWNED BY inbox_regress_dba;
DROP OWNED BY inbox_regress_nobody;
SELECT extname, extowner::regrole FROM pg_extension WHERE extname = 'inbox';

-- Someone who may not drop the extension gets PostgreSQL's own error.
SET ROLE inbox_regress_nobody;
DROP EXTENSION inbox;
RESET ROLE;

-- DROP SCHEMA ... CASCADE of the extension's schema warns, then drops.
DROP SCHEMA app_inbox;
DROP SCHEMA app_inbox CASCADE;
SELECT count(*) AS extensions FROM pg_extension WHERE extname = 'inbox';
DROP ROLE inbox_regress_dba, inbox_regress_nobody;
