--
-- ranges: the documented ranges of the deferred mode's arguments.  Each
-- value outside its range is refused with 22023 and writes nothing; each
-- edge is accepted.
--
--   - durations (a lease, a wait, a retry delay) have no part in months or
--     years, whose length depends on the calendar while their bounds are
--     checked with months of 30 days ('1 mon -30 days 1 second' compares
--     as a second and runs for about a day); a day counts as 24 hours, in
--     the checks and in the deadlines alike;
--   - inbox_set_max_attempts keeps to the range of inbox.max_attempts;
--   - a receive's not_before is not 'infinity' (pending for ever);
--     '-infinity' means at once;
--   - a retention is within its bounds as intervals compare and as the
--     purge measures it.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';

-- The span a duration runs for: its days at 24 hours, in its time.
SELECT d AS duration, inbox.check_duration(d, 'lease') AS span
FROM unnest(ARRAY['1 day', '24 hours', '2 days -1 hour', '1 day -86340 seconds', '-3 days']::interval[]) d;
SELECT regress.try($$SELECT inbox.check_duration('2147483647 days', 'lease')$$);
SELECT inbox.check_duration(NULL, 'lease') IS NULL AS null_is_null;

-- Leases and waits of a take or a poll with a part in months or years
-- are refused, and nothing is taken.  (Each call has a message it could
-- take, so that a wait let through by mistake would end at once.)
SELECT count(inbox_receive('ranges', 'r-' || g, '{}'::jsonb)) FROM generate_series(1, 7) g;
SELECT regress.try($$SELECT * FROM inbox_take('ranges', 1, '1 mon')$$);
SELECT regress.try($$SELECT * FROM inbox_take('ranges', 1, '1 mon -30 days 1 second')$$);
SELECT regress.try($$SELECT * FROM inbox_poll('ranges', 1, '1 year')$$);
SELECT regress.try($$SELECT * FROM inbox_poll('ranges', 1, '1 mon -30 days 1 second')$$);
SELECT regress.try($$SELECT * FROM inbox_poll('ranges', 1, '30 s', '1 mon -30 days 1 second')$$);
SELECT regress.try($$SELECT * FROM inbox_poll('ranges', 1, '30 s', '-1 mon 30 days 1 second')$$);
SELECT regress.try($$SELECT * FROM inbox_take('ranges', 1, '2147483647 days')$$);
-- A day is 24 hours: a wait of a day less 86,339 seconds is 61 seconds.
SELECT regress.try($$SELECT * FROM inbox_poll('ranges', 1, '30 s', '1 day -86339 seconds')$$);
SELECT state, attempts, count(*) FROM inbox.entries WHERE scope = 'ranges' GROUP BY 1, 2;
DELETE FROM inbox.entries WHERE scope = 'ranges' AND message_id <> 'r-1';

-- The edges: a wait of 60 seconds, in any form (the poll returns at once,
-- with the message), and a lease of a day, as '1 day' or '24 hours'.
SELECT message_id, attempts FROM inbox_poll('ranges', 1, '1 day', '60 seconds');
SELECT extract(epoch FROM lease_until - taken_at) AS lease_seconds FROM inbox.entries WHERE scope = 'ranges';
UPDATE inbox.entries SET due = now() - interval '1 second', lease_until = now() - interval '1 second'
 WHERE scope = 'ranges' AND message_id = 'r-1';
SELECT inbox.forget_front('ranges');  -- moved by hand: the front must hear of it
SELECT message_id, attempts FROM inbox_poll('ranges', 1, '24 hours', '1 day -86340 seconds');
SELECT extract(epoch FROM lease_until - taken_at) AS lease_seconds FROM inbox.entries WHERE scope = 'ranges';

-- inbox_extend, by receipt (C) and by message id (SQL): refused with
-- months, and the lease stays as it was.
CREATE TABLE regress.ranges_receipt AS SELECT receipt FROM inbox.entries WHERE scope = 'ranges';
SELECT regress.try(format($$SELECT inbox_extend('ranges', %L::uuid, '1 mon -30 days 1 second')$$, receipt))
FROM regress.ranges_receipt;
SELECT regress.try(format($$SELECT inbox_extend('ranges', %L::uuid, '1 year')$$, receipt))
FROM regress.ranges_receipt;
-- This session polled it: it holds it by message id too.
SELECT regress.try($$SELECT inbox_extend('ranges', 'r-1', '1 mon -30 days 1 second')$$);
SELECT regress.try($$SELECT inbox_extend('ranges', 'r-1', '2 mons')$$);
SELECT state, extract(epoch FROM lease_until - taken_at) AS lease_seconds FROM inbox.entries WHERE scope = 'ranges';
-- A day is 24 hours in both.
SELECT inbox_extend('ranges', receipt, '1 day') - now() BETWEEN interval '24 hours' AND interval '24 hours 1 minute'
	   AS one_day
FROM regress.ranges_receipt;
SELECT inbox_extend('ranges', 'r-1', '1 day 1 hour') - now() BETWEEN interval '25 hours' AND interval '25 hours 1 minute'
	   AS one_day_one_hour;

-- inbox_fail, by receipt and by message id: a retry delay with months is
-- refused, and the message stays where it was.
SELECT regress.try(format($$SELECT inbox_fail('ranges', %L::uuid, 'x', '1 mon')$$, receipt))
FROM regress.ranges_receipt;
SELECT regress.try($$SELECT inbox_fail('ranges', 'r-1', 'x', '-1 mon 31 days')$$);
SELECT regress.try($$SELECT inbox_fail('ranges', 'r-1', 'x', '-1 second')$$);
SELECT state, attempts, last_error FROM inbox.entries WHERE scope = 'ranges';
-- A retry after a day is due 24 hours later.
BEGIN;
SELECT inbox_fail('ranges', 'r-1', 'x', '1 day');
SELECT state, due - now() BETWEEN interval '24 hours' AND interval '24 hours 1 minute' AS one_day
FROM inbox.entries WHERE scope = 'ranges';
COMMIT;
DROP TABLE regress.ranges_receipt;

-- inbox_set_max_attempts: the range of inbox.max_attempts, 1 to 1000.
SELECT min_val, max_val FROM pg_settings WHERE name = 'inbox.max_attempts';
SELECT regress.try($$SELECT inbox_set_max_attempts('ranges', 1001)$$);
SELECT regress.try($$SELECT inbox_set_max_attempts('ranges', 0)$$);
SELECT regress.try($$SELECT inbox_set_max_attempts('ranges', -2147483648)$$);
SELECT count(*) AS scope_rows FROM inbox.scopes WHERE scope = 'ranges';
SELECT inbox_set_max_attempts('ranges', 1000);
SELECT regress.try($$SELECT inbox_set_max_attempts('ranges', 2147483647)$$);
SELECT max_attempts, inbox.max_attempts('ranges') FROM inbox.scopes WHERE scope = 'ranges';
SELECT inbox_set_max_attempts('ranges', 1);
SELECT max_attempts FROM inbox.scopes WHERE scope = 'ranges';
-- NULL goes back to the setting.
SELECT inbox_set_max_attempts('ranges', NULL);
SELECT max_attempts, inbox.max_attempts('ranges') FROM inbox.scopes WHERE scope = 'ranges';

-- not_before 'infinity' is refused by every receive, which writes nothing.
SELECT regress.try_rows($$SELECT inbox_receive('ranges-nb', 'n-1', '{}'::jsonb, NULL, 'infinity')$$);
SELECT regress.try_rows($$SELECT inbox_receive('ranges-nb', 'n-1', '\x01'::bytea, NULL, 'infinity')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('ranges-nb', ARRAY['n-1', 'n-2'],
	ARRAY['{}', '{}']::jsonb[], not_before => 'infinity')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('ranges-nb', ARRAY['n-1'],
	ARRAY['\x01']::bytea[], not_before => 'infinity')$$);
-- '-infinity' is at once: due now, and taken.
SELECT inbox_receive('ranges-nb', 'n-1', '{}'::jsonb, NULL, '-infinity');
SELECT inbox_receive('ranges-nb', 'n-2', '\x01'::bytea, NULL, '-infinity');
SELECT * FROM inbox_receive_many('ranges-nb', ARRAY['n-3'], ARRAY['{}']::jsonb[], not_before => '-infinity');
SELECT * FROM inbox_receive_many('ranges-nb', ARRAY['n-4'], ARRAY['\x01']::bytea[], not_before => '-infinity');
SELECT message_id, due = received_at AS due_at_once FROM inbox.entries WHERE scope = 'ranges-nb' ORDER BY 1;
SELECT message_id FROM inbox_take('ranges-nb', 10) ORDER BY 1;

-- Retention: months are allowed (the purge counts a month as 30 days and
-- never adds one by the calendar), but both measures must be in bounds.
-- '-1 year 361 days' compares as a day, and is 4.25 days before now to the
-- purge, which would remove every done entry of the scope.
SELECT regress.try($$SELECT inbox_set_retention('ranges', '-1 year 361 days')$$);
SELECT regress.try($$SELECT inbox_set_retention('ranges', '68 years 1 mon')$$);
SELECT retention FROM inbox.scopes WHERE scope = 'ranges';
SELECT inbox_set_retention('ranges', '3 mons');
SELECT inbox_set_retention('ranges', '68 years');
SELECT retention FROM inbox.scopes WHERE scope = 'ranges';

SELECT inbox_drop_scope('ranges'), inbox_drop_scope('ranges-nb');
