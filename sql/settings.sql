--
-- settings: every inbox.* setting refuses malformed and out-of-range values,
-- through SET and through ALTER SYSTEM, with SQLSTATE 22023 and a message
-- that names the setting; the value in force is unchanged.
--
CREATE TABLE regress.bad_settings (name text, value text);
INSERT INTO regress.bad_settings VALUES
	('inbox.on_duplicate', 'ignore'), ('inbox.on_duplicate', ''),
	('inbox.on_duplicate', 'raise; DROP TABLE x'), ('inbox.on_duplicate', '1'),
	('inbox.claim_timeout', '-1'), ('inbox.claim_timeout', '1 fortnight'),
	('inbox.claim_timeout', '10 parsecs'), ('inbox.claim_timeout', 'NaN'),
	('inbox.claim_timeout', '99999999999999999999'), ('inbox.claim_timeout', '1e400'),
	('inbox.retention', '0'), ('inbox.retention', '-7d'), ('inbox.retention', '3000000000'),
	('inbox.retention', 'forever'), ('inbox.retention', ''), ('inbox.retention', '1 week'),
	('inbox.idle_threshold', '0'), ('inbox.idle_threshold', '1h30'), ('inbox.idle_threshold', '%s'),
	('inbox.purge_batch_size', '0'), ('inbox.purge_batch_size', '1000001'),
	('inbox.purge_batch_size', '10 kB'), ('inbox.purge_batch_size', '1.5e9'),
	('inbox.purge_enabled', 'maybe'), ('inbox.purge_enabled', '2'), ('inbox.purge_enabled', ''),
	('inbox.purge_lock_timeout', '0'), ('inbox.purge_lock_timeout', '11min'),
	('inbox.purge_lock_timeout', E'200\\'),
	('inbox.max_attempts', '0'), ('inbox.max_attempts', '1001'), ('inbox.max_attempts', 'five'),
	('inbox.no_such_setting', 'on');

-- SET: each is refused, and the current value stays.
SELECT b.name, b.value,
	   regress.try(format('SET %s = %L', b.name, b.value)) AS result,
	   CASE WHEN b.name <> 'inbox.no_such_setting'
			THEN current_setting(b.name) END AS still
FROM regress.bad_settings b ORDER BY b.name, b.value;

-- ALTER SYSTEM validates the same way before writing anything (it cannot
-- run inside a function, so one statement each).
ALTER SYSTEM SET inbox.on_duplicate = 'ignore';
ALTER SYSTEM SET inbox.claim_timeout = '-1';
ALTER SYSTEM SET inbox.retention = '0';
ALTER SYSTEM SET inbox.retention = '1 fortnight';
ALTER SYSTEM SET inbox.idle_threshold = '-1s';
ALTER SYSTEM SET inbox.purge_batch_size = '0';
ALTER SYSTEM SET inbox.purge_naptime = '0';
ALTER SYSTEM SET inbox.purge_naptime = '2d';
ALTER SYSTEM SET inbox.purge_enabled = 'maybe';
ALTER SYSTEM SET inbox.purge_lock_timeout = '11min';
ALTER SYSTEM SET inbox.max_attempts = '1001';
ALTER SYSTEM SET inbox.max_scopes = '10';
ALTER SYSTEM SET inbox.no_such_setting = 'on';
SELECT pg_read_file('postgresql.auto.conf') !~ 'inbox' AS nothing_written;

-- Settings that may not change at run time say so.
SELECT regress.try($$SET inbox.purge_naptime = '30s'$$);
SELECT regress.try($$SET inbox.max_scopes = 2000$$);

-- Good values with units are accepted and shown in the setting's unit.
SET inbox.retention = '36h';
SET inbox.claim_timeout = '1.5s';
SET inbox.purge_lock_timeout = '1s';
SELECT current_setting('inbox.retention') AS retention,
	   current_setting('inbox.claim_timeout') AS claim_timeout,
	   current_setting('inbox.purge_lock_timeout') AS purge_lock_timeout;
RESET ALL;
DROP TABLE regress.bad_settings;
