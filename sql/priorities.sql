--
-- priorities: a take hands out higher priorities first, then by due; a
-- message due for longer than inbox.priority_age goes before every message
-- that has not waited as long; within a group, order wins over priority.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- The stored priorities of a scope's messages
CREATE FUNCTION regress.levels(p_scope text) RETURNS TABLE (message_id text, priority smallint, state "char")
LANGUAGE sql AS $$
	SELECT e.message_id, e.priority, e.state FROM inbox.entries e
	 WHERE e.scope = p_scope ORDER BY e.message_id
$$;
-- Age a scope's open messages by hand, as if they had waited: a test
-- cannot wait an hour, and inbox.priority_age counts from due.
CREATE FUNCTION regress.age(p_scope text, p_ids text[], p_by interval) RETURNS void
LANGUAGE sql AS $$
	UPDATE inbox.entries SET due = due - p_by
	 WHERE scope = p_scope AND message_id = ANY (p_ids) AND due IS NOT NULL
$$;

-- Higher priorities first, then by due; within a due, by id.  The default
-- (0) is stored as NULL.
SELECT inbox_receive('prio', 'low-1', '{}'::jsonb);
SELECT inbox_receive('prio', 'high-1', '{}'::jsonb, priority => 9);
SELECT inbox_receive('prio', 'low-2', '{}'::jsonb, priority => 0);
SELECT inbox_receive('prio', 'mid-1', '{}'::jsonb, priority => 3);
SELECT inbox_receive('prio', 'high-2', '\x01'::bytea, priority => 9);
SELECT inbox_receive('prio', 'mid-2', '{}'::jsonb, NULL, NULL, NULL, 3);
SELECT * FROM regress.levels('prio');
SELECT regress.take_ids('prio', 1);
SELECT regress.take_ids('prio', 3);
SELECT regress.take_ids('prio');

-- A batch: one priority per id, NULL for the default; a duplicate keeps
-- the priority its message was received with.
SELECT * FROM inbox_receive_many('prio-batch', ARRAY['a', 'b', 'c', 'd', 'b'],
								 ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[],
								 priorities => ARRAY[0, 5, NULL, 7, 1]);
SELECT * FROM inbox_receive_many('prio-batch', ARRAY['d', 'e'], ARRAY['{}', '{}']::jsonb[],
								 priorities => ARRAY[1, 2]);
SELECT * FROM inbox_receive_many('prio-batch', ARRAY['f'], ARRAY['\x01']::bytea[],
								 priorities => ARRAY[4]);
SELECT * FROM regress.levels('prio-batch');
SELECT regress.take_ids('prio-batch');

-- A delayed message keeps its priority and is not taken before its time;
-- when due, it goes first.
SELECT inbox_receive('prio-delayed', 'now-low', '{}'::jsonb);
SELECT inbox_receive('prio-delayed', 'later-high', '{}'::jsonb, not_before => now() + interval '1 hour', priority => 8);
SELECT regress.take_ids('prio-delayed');
SELECT regress.age('prio-delayed', ARRAY['later-high'], interval '2 hours');
SELECT inbox_receive('prio-delayed', 'now-low-2', '{}'::jsonb);
-- A row moved by hand is found by a scan from the oldest, which no front
-- spares (the takes of a scope run one at least once a second anyway)
BEGIN;
SET LOCAL inbox.take_front = off;
SELECT regress.take_ids('prio-delayed');
COMMIT;

-- A failure with a retry delay, a requeued dead letter: the priority stays.
SELECT inbox_receive('prio-retry', 'r-low', '{}'::jsonb);
SELECT inbox_receive('prio-retry', 'r-high', '{}'::jsonb, priority => 2);
SELECT regress.take_ids('prio-retry', 1);
SELECT inbox_fail('prio-retry', 'r-high', 'boom', retry_after => interval '1 hour');
SELECT regress.take_ids('prio-retry');
SELECT inbox_fail('prio-retry', 'r-low', 'boom');
SELECT regress.age('prio-retry', ARRAY['r-high'], interval '1 hour 1 minute');
SELECT inbox_receive('prio-retry', 'r-new', '{}'::jsonb, priority => 1);
SELECT regress.take_ids('prio-retry');
SELECT * FROM regress.levels('prio-retry');
SELECT inbox_set_max_attempts('prio-retry', 1);
SELECT inbox_fail('prio-retry', 'r-high', 'dead now');
SELECT message_id FROM inbox_dead_letters WHERE scope = 'prio-retry';
SELECT inbox_requeue('prio-retry', 'r-high');
SELECT inbox_set_max_attempts('prio-retry', NULL);
SELECT inbox_receive('prio-retry', 'r-newer', '{}'::jsonb, priority => 1);
SELECT regress.take_ids('prio-retry');
SELECT * FROM regress.levels('prio-retry');

-- Aging: a message due for longer than inbox.priority_age goes before
-- those that have not waited as long, whatever their priority; the aged
-- go by due.  0 makes priorities strict.  (The scope is new: its front
-- has not passed the messages aged by hand.)
SHOW inbox.priority_age;
SELECT inbox_receive('prio-aging', 'old-low', '{}'::jsonb);
SELECT inbox_receive('prio-aging', 'old-mid', '{}'::jsonb, priority => 2);
SELECT inbox_receive('prio-aging', 'new-low', '{}'::jsonb);
SELECT inbox_receive('prio-aging', 'new-high', '{}'::jsonb, priority => 9);
SELECT inbox_receive('prio-aging', 'new-mid', '{}'::jsonb, priority => 2);
SELECT regress.age('prio-aging', ARRAY['old-low', 'old-mid'], interval '61 minutes');
BEGIN;
SELECT regress.take_ids('prio-aging');
ROLLBACK;
BEGIN;
SET LOCAL inbox.priority_age = '2h';
SELECT regress.take_ids('prio-aging');
ROLLBACK;
BEGIN;
SET LOCAL inbox.priority_age = 0;
SELECT regress.take_ids('prio-aging');
ROLLBACK;
-- One at a time, each take starting where the last one left
BEGIN;
SELECT regress.take_ids('prio-aging', 1);
SELECT regress.take_ids('prio-aging', 1);
SELECT regress.take_ids('prio-aging', 1);
SELECT regress.take_ids('prio-aging', 1);
SELECT regress.take_ids('prio-aging', 1);
SELECT regress.take_ids('prio-aging', 1);
ROLLBACK;
SELECT regress.try($$SET inbox.priority_age = '-1s'$$);

-- Polls under a lease: a lost lease is taken again at its priority.
SELECT inbox_receive('prio-leased', 'l-low', '{}'::jsonb);
SELECT inbox_receive('prio-leased', 'l-high', '{}'::jsonb, priority => 4);
SELECT message_id FROM inbox_poll('prio-leased', 1, lease => interval '1 hour');
UPDATE inbox.entries SET lease_until = now() - interval '1 second', due = now() - interval '1 second'
 WHERE scope = 'prio-leased' AND message_id = 'l-high';
SELECT message_id, attempts FROM inbox_poll('prio-leased', 5, lease => interval '1 hour');

-- Within a group, order wins over priority: a member above the default
-- waits behind its head; the head, once due, competes with its own
-- priority.
SELECT inbox_receive('prio-grouped', 'g-1', '{}'::jsonb, group_key => 'k');
SELECT inbox_receive('prio-grouped', 'g-2', '{}'::jsonb, group_key => 'k', priority => 9);
SELECT inbox_receive('prio-grouped', 'loose-low', '{}'::jsonb);
SELECT inbox_receive('prio-grouped', 'loose-high', '{}'::jsonb, priority => 5);
SELECT regress.take_ids('prio-grouped');
SELECT inbox_complete('prio-grouped', 'g-1');
SELECT inbox_receive('prio-grouped', 'later-low', '{}'::jsonb);
SELECT regress.take_ids('prio-grouped');

-- Bad input: a clear SQLSTATE, and nothing written.
SELECT regress.try($$SELECT inbox_receive('prio-bad', 'b1', '{}'::jsonb, priority => -1)$$);
SELECT regress.try($$SELECT inbox_receive('prio-bad', 'b2', '\x01'::bytea, priority => 32768)$$);
-- Beyond an integer, no function matches
SELECT regress.try($$SELECT inbox_receive('prio-bad', 'b3', '{}'::jsonb, priority => 3000000000)$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('prio-bad', ARRAY['b4', 'b5'], ARRAY['{}', '{}']::jsonb[], priorities => ARRAY[1])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('prio-bad', ARRAY['b6', 'b7'], ARRAY['{}', '{}']::jsonb[], priorities => ARRAY[1, -2])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('prio-bad', ARRAY['b8'], ARRAY['{}']::jsonb[], priorities => ARRAY[[1]])$$);
SELECT regress.try($$SELECT * FROM inbox_receive_many('prio-bad', ARRAY['b9'], ARRAY['\x01']::bytea[], priorities => ARRAY[40000])$$);
SELECT count(*) FROM inbox.entries WHERE scope = 'prio-bad';

-- A priority with the default (NULL) is the default
SELECT inbox_receive('prio-nulls', 'n1', '{}'::jsonb, priority => NULL);
SELECT * FROM inbox_receive_many('prio-nulls', ARRAY['n2'], ARRAY['{}']::jsonb[], priorities => NULL);
SELECT * FROM regress.levels('prio-nulls');

-- Dropped scopes leave no priority behind
SELECT inbox_drop_scope(s) > 0 AS dropped
  FROM unnest(ARRAY['prio', 'prio-batch', 'prio-delayed', 'prio-retry', 'prio-aging', 'prio-leased',
					'prio-grouped', 'prio-nulls']) s;
SELECT count(*) FROM inbox.entries WHERE priority IS NOT NULL;
