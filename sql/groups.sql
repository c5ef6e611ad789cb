--
-- groups: ordered groups of the deferred mode.  A take hands out one
-- message per group at a time, its head; the next follows the head's
-- completion, or its death where the scope skips dead letters.  Real
-- concurrency is in the isolation spec groups.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- A group's members, in order, with their state and whether they are due
CREATE FUNCTION regress.members(p_scope text) RETURNS TABLE (group_key text, message_id text, pos bigint,
															 skipped boolean, state "char", due boolean)
LANGUAGE sql AS $$
	SELECT m.group_key, m.message_id, m.position, m.skipped, e.state, e.due IS NOT NULL
	  FROM inbox.group_members m
	  JOIN inbox.entries e ON e.scope = m.scope AND e.message_id = m.message_id
	 WHERE m.scope = p_scope
	 ORDER BY m.group_key, m.position
$$;

-- Every call shape of 1.0.0 resolves as before, to the one form of each
-- payload type.
SELECT inbox_receive('shapes', 'a', '{"n": 1}'::jsonb);
SELECT inbox_receive('shapes', 'b', '{"n": 2}'::jsonb, NULL);
SELECT inbox_receive('shapes', 'c', '{"n": 3}'::jsonb, '\x01');
SELECT inbox_receive('shapes', 'd', '{"n": 4}'::jsonb, NULL, now() - interval '1 second');
SELECT inbox_receive('shapes', 'e', '\x0102'::bytea);
SELECT inbox_receive('shapes', 'f', '\x0102'::bytea, '\x02');
SELECT inbox_receive('shapes', 'g', '\x0102'::bytea, NULL, NULL);
SELECT inbox_receive(scope => 'shapes', message_id => 'h', payload => '{}'::jsonb);
SELECT inbox_receive(scope => 'shapes', message_id => 'i', payload => '{}'::jsonb,
					 not_before => now() - interval '1 second');
SELECT count(*) FROM inbox_receive_many('shapes', ARRAY['j', 'k'], ARRAY['{}', '{}']::jsonb[]);
SELECT count(*) FROM inbox_receive_many('shapes', ARRAY['l'], ARRAY['{}']::jsonb[], NULL);
SELECT count(*) FROM inbox_receive_many('shapes', ARRAY['m'], ARRAY['\x01']::bytea[], NULL, NULL);
SELECT count(*) FROM inbox_receive_many('shapes', ARRAY['n'], ARRAY['{}']::jsonb[], NULL, NULL, 'return');
SELECT count(*) FROM inbox_receive_many(scope => 'shapes', message_ids => ARRAY['o'],
										payloads => ARRAY['{}']::jsonb[], on_mismatch => 'return');
SELECT p.oid::regprocedure FROM pg_proc p
 WHERE p.proname IN ('inbox_receive', 'inbox_receive_many')
   AND p.pronamespace = 'public'::regnamespace ORDER BY 1::text;
-- None of them joined a group
SELECT count(*) FROM inbox.group_members;
SELECT regress.take_ids('shapes');

-- A group hands out its head only; messages without a group and other
-- groups go beside it.
SELECT inbox_receive('ordered', 'o42-created', '{"order": 42, "event": "created"}'::jsonb, group_key => 'order-42');
SELECT inbox_receive('ordered', 'o42-paid', '{"order": 42, "event": "paid"}'::jsonb, group_key => 'order-42');
SELECT inbox_receive('ordered', 'o42-shipped', '{"order": 42, "event": "shipped"}'::jsonb, group_key => 'order-42');
SELECT inbox_receive('ordered', 'o7-created', '{"order": 7, "event": "created"}'::jsonb, group_key => 'order-7');
SELECT inbox_receive('ordered', 'audit-1', '{"audit": 1}'::jsonb);
SELECT * FROM regress.members('ordered');
BEGIN;
SELECT message_id, group_key FROM inbox_take('ordered', 100) ORDER BY 1;
-- While the head is held, nothing more of its group
SELECT regress.take_ids('ordered');
SELECT inbox_complete('ordered', 'o42-created');
-- The completion is not committed, and this session sees the next head
-- only once it is (another session would not see it before then either)
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';
COMMIT;
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';
-- An aborted completion puts the head back at the front
BEGIN;
SELECT regress.take_ids('ordered');
COMMIT;
BEGIN;
SELECT inbox_complete('ordered', 'o42-paid');
ROLLBACK;
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';

-- A head that fails with a retry delay keeps its group waiting
SELECT inbox_fail('ordered', 'o42-paid', 'payment service down', retry_after => '1 hour');
SELECT regress.take_ids('ordered');
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';
-- inbox_stats counts the group as blocked, since the head's take
SELECT scope, groups_blocked, oldest_group_block_age >= '0' AS aged FROM inbox_stats WHERE scope = 'ordered';
-- Its retry comes due (moved by hand here): it is handed out again, first
UPDATE inbox.entries SET due = now() - interval '1 second' WHERE scope = 'ordered' AND message_id = 'o42-paid';
SELECT inbox.forget_front('ordered');
SELECT regress.take_ids('ordered');

-- Dead letters block their group by default
SELECT inbox_set_max_attempts('ordered', 2);
SELECT inbox_fail('ordered', 'o42-paid', 'card declined');
SELECT regress.take_ids('ordered');
SELECT scope, message_id, attempts, group_key FROM inbox_dead_letters WHERE scope = 'ordered';
-- inbox_requeue gives the head back
SELECT inbox_requeue('ordered', 'o42-paid');
SELECT regress.take_ids('ordered');
SELECT inbox_set_max_attempts('ordered', 1);
SELECT inbox_fail('ordered', 'o42-paid', 'card declined for good');
SELECT regress.take_ids('ordered');
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';
SELECT scope, groups_blocked, oldest_group_block_age >= '0' AS aged FROM inbox_stats WHERE scope = 'ordered';
-- 'skip' releases the groups that dead heads hold now
SELECT inbox_set_group_dead_letters('ordered', 'skip');
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';
SELECT regress.take_ids('ordered');
SELECT scope, message_id, group_key FROM inbox_dead_letters WHERE scope = 'ordered';
SELECT scope, groups_blocked, oldest_group_block_age FROM inbox_stats WHERE scope = 'ordered';
-- A skipped dead letter that is requeued goes on its own
SELECT inbox_requeue('ordered', 'o42-paid');
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-42';
SELECT regress.take_ids('ordered');
SELECT inbox_complete('ordered', 'o42-paid');
SELECT inbox_complete('ordered', 'o42-shipped');
SELECT count(*) FROM regress.members('ordered') WHERE group_key = 'order-42';
-- A group whose last message left has no row left
SELECT group_key FROM inbox.groups WHERE scope = 'ordered' ORDER BY 1;

-- Under 'skip', a head that dies lets the next one go in the same
-- transaction
SELECT inbox_receive('ordered', 'o9-a', '{}'::jsonb, group_key => 'order-9');
SELECT inbox_receive('ordered', 'o9-b', '{}'::jsonb, group_key => 'order-9');
SELECT regress.take_ids('ordered');
SELECT inbox_fail('ordered', 'o9-a', 'bad');
SELECT * FROM regress.members('ordered') WHERE group_key = 'order-9';
SELECT regress.take_ids('ordered');
SELECT inbox_complete('ordered', 'o9-b');
SELECT inbox_set_group_dead_letters('ordered', NULL);
SELECT inbox_set_max_attempts('ordered', NULL);

-- By receipt: a poll's completion releases the group too
SELECT inbox_receive('ordered', 'o5-a', '{}'::jsonb, group_key => 'order-5');
SELECT inbox_receive('ordered', 'o5-b', '{}'::jsonb, group_key => 'order-5');
CREATE TABLE regress.held AS SELECT message_id, receipt, group_key FROM inbox_poll('ordered', 10, lease => '1 minute');
SELECT message_id, group_key FROM regress.held ORDER BY 1;
SELECT count(*) FROM inbox_poll('ordered', 10, lease => '1 minute');
SELECT inbox_complete('ordered', (SELECT receipt FROM regress.held WHERE message_id = 'o5-a'));
SELECT message_id FROM inbox_poll('ordered', 10, lease => '1 minute');
DROP TABLE regress.held;

-- A batch: each group's messages in the order of the arrays, whatever
-- the order of the ids; a duplicate is not queued again.
SELECT * FROM inbox_receive_many('batched', ARRAY['z3', 'y2', 'x1', 'w', 'z3'],
								 ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[],
								 group_keys => ARRAY['k', 'k', 'k', NULL, 'k']);
SELECT * FROM regress.members('batched');
SELECT * FROM inbox_receive_many('batched', ARRAY['x1', 'v0'], ARRAY['{}', '{}']::jsonb[],
								 group_keys => ARRAY['k', 'k']);
SELECT * FROM regress.members('batched');
SELECT regress.take_ids('batched');
-- A single receive of an id already stored joins nothing either
SELECT inbox_receive('batched', 'y2', '{}'::jsonb, group_key => 'k');
SELECT count(*) FROM inbox.group_members WHERE scope = 'batched';

-- A delayed head: its group waits for it
SELECT inbox_receive('delayed', 'l1', '{}'::jsonb, NULL, now() + interval '1 hour', 'g');
SELECT inbox_receive('delayed', 'l2', '{}'::jsonb, group_key => 'g');
SELECT regress.take_ids('delayed');
-- A later message received with a not_before keeps it when it becomes
-- the head: it is due then, not at the completion of the one before
SELECT inbox_receive('delayed', 'h1', '{}'::jsonb, group_key => 'h');
SELECT inbox_receive('delayed', 'h2', '{}'::jsonb, NULL, now() + interval '1 hour', 'h');
SELECT regress.take_ids('delayed');
SELECT inbox_complete('delayed', 'h1');
SELECT message_id, state, due > now() + interval '59 minutes' AS delayed FROM inbox.entries
 WHERE scope = 'delayed' AND message_id = 'h2';
SELECT regress.take_ids('delayed');

-- Bad input: a clear SQLSTATE, nothing written
SELECT regress.try_rows($$SELECT inbox_receive('bad', 'b1', '{}'::jsonb, group_key => '')$$);
SELECT regress.try_rows($$SELECT inbox_receive('bad', 'b1', '{}'::jsonb, group_key => repeat('k', 1025))$$);
SELECT regress.try_rows($$SELECT inbox_receive('bad', 'b1', '\x00'::bytea, group_key => '')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('bad', ARRAY['b1', 'b2'], ARRAY['{}', '{}']::jsonb[],
														   group_keys => ARRAY['k'])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('bad', ARRAY['b1', 'b2'], ARRAY['{}', '{}']::jsonb[],
														   group_keys => ARRAY['k', ''])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('bad', ARRAY['b1'], ARRAY['{}']::jsonb[],
														   group_keys => ARRAY[repeat('é', 513)])$$);
SELECT regress.try($$SELECT inbox_set_group_dead_letters('bad', 'drop')$$);
SELECT count(*) FROM inbox.groups WHERE scope = 'bad';
SELECT count(*) FROM inbox.scopes WHERE scope = 'bad';

-- Dropping a scope drops its groups
SELECT inbox_drop_scope('batched');
SELECT count(*) FROM inbox.groups WHERE scope = 'batched';
SELECT count(*) FROM inbox.group_members WHERE scope = 'batched';
