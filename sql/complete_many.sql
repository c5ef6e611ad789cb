--
-- complete_many: inbox_complete_many, a batch of completions by receipt.
-- Each receipt is completed as inbox_complete by receipt completes it; one
-- that cannot be is reported, and the others complete.  A completed head
-- of an ordered group releases its group as the single form does, and a
-- receipt not completed releases nothing.  Errors of the whole call raise
-- and complete nothing.  Another session's take is simulated as in poll:
-- a lease moved into the past by hand, then a poll.
--
SET timezone = 'UTC';
CREATE TABLE regress.batch (message_id text, receipt uuid);
GRANT SELECT ON regress.batch TO PUBLIC;
-- The receipts of the batch, in message id order
CREATE FUNCTION regress.receipts(p_ids text[] DEFAULT NULL) RETURNS uuid[] LANGUAGE sql AS $$
	SELECT array_agg(receipt ORDER BY message_id) FROM regress.batch
	 WHERE p_ids IS NULL OR message_id = ANY (p_ids)
$$;
-- The batch's result, with message ids for receipts (random)
CREATE FUNCTION regress.complete_many(p_scope text, p_receipts uuid[], p_results jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text) LANGUAGE sql AS $$
	SELECT c.ordinality, coalesce(b.message_id, '(unknown)'), c.status
	  FROM inbox_complete_many(p_scope, p_receipts, p_results) AS c
	  LEFT JOIN regress.batch AS b ON b.receipt = c.receipt
	 ORDER BY c.ordinality
$$;
-- Let the lease of a message run out, first of its scope's due messages;
-- the poll that follows has it
CREATE FUNCTION regress.expire(p_scope text, p_id text) RETURNS void LANGUAGE sql AS $$
	UPDATE inbox.entries SET lease_until = now() - interval '1 second', due = '2000-01-01'
	 WHERE scope = p_scope AND message_id = p_id
$$;

-- Every receipt completed, each with its result, in the order given.
SELECT count(inbox_receive('cm', 'cm-' || g, jsonb_build_object('n', g))) FROM generate_series(1, 9) g;
INSERT INTO regress.batch SELECT message_id, receipt FROM inbox_poll('cm', 3, lease => '1 minute');
SELECT * FROM regress.complete_many('cm', regress.receipts(),
	ARRAY['{"r": 1}', NULL, '{"r": 3}']::jsonb[]);
SELECT message_id, state, result, receipt IS NULL AS no_receipt, owner_session IS NULL AS no_owner,
	   lease_until IS NULL AS no_lease, due IS NULL AS not_due, finished_at IS NOT NULL AS finished
FROM inbox.entries WHERE scope = 'cm' AND message_id IN ('cm-1', 'cm-2', 'cm-3') ORDER BY 1;
SELECT inbox_result('cm', 'cm-1') AS result_1, inbox_result('cm', 'cm-2') AS result_2;

-- A mixed batch: a receipt already used (cm-1), one that was never given,
-- one whose message another take has since its lease ran out (cm-6), one
-- whose message was failed (cm-7), one given twice (cm-4); the others
-- (cm-4, cm-5) complete, with their results.
INSERT INTO regress.batch SELECT message_id, receipt FROM inbox_poll('cm', 4, lease => '1 minute');
SELECT regress.expire('cm', 'cm-6');
SELECT inbox.forget_front('cm');  -- moved by hand: the front must hear of it
SELECT message_id FROM inbox_poll('cm', 1, lease => '1 hour');
SELECT inbox_fail('cm', receipt, 'flaky', '1 hour') FROM regress.batch WHERE message_id = 'cm-7';
SELECT * FROM regress.complete_many('cm',
	regress.receipts(ARRAY['cm-6', 'cm-4', 'cm-1']) ||
	'00000000-0000-4000-8000-000000000000'::uuid ||
	regress.receipts(ARRAY['cm-5', 'cm-7', 'cm-4']),
	ARRAY['{"r": 1}', '{"r": 4}', '{"r": 6}', '{"r": 0}', '{"r": 44}', '{"r": 5}', '{"r": 7}']::jsonb[]);
SELECT message_id, state, result, attempts FROM inbox.entries
WHERE scope = 'cm' AND message_id IN ('cm-1', 'cm-4', 'cm-5', 'cm-6', 'cm-7') ORDER BY 1;
-- The message another take has is still held by its new receipt.
SELECT inbox_complete('cm', receipt, '{"by": "new owner"}')
FROM inbox.entries WHERE scope = 'cm' AND message_id = 'cm-6';
SELECT inbox_result('cm', 'cm-6');
-- A batch of receipts that hold nothing raises nothing.
SELECT * FROM regress.complete_many('cm', regress.receipts(ARRAY['cm-1', 'cm-6']));
-- In a transaction that rolls back, the completions go with it.
INSERT INTO regress.batch SELECT message_id, receipt FROM inbox_poll('cm', 1, lease => '1 minute');
BEGIN;
SELECT * FROM regress.complete_many('cm', regress.receipts(ARRAY['cm-8']));
ROLLBACK;
SELECT state FROM inbox_status('cm', 'cm-8');
SELECT * FROM regress.complete_many('cm', regress.receipts(ARRAY['cm-8']));

-- Ordered groups: a completed head lets its group's next message go; a
-- group whose last message is completed is gone; a head whose receipt
-- another take made stale is not completed and holds its group.
SELECT inbox_receive('cmg', 'a-1', '{}'::jsonb, group_key => 'a');
SELECT inbox_receive('cmg', 'a-2', '{}'::jsonb, group_key => 'a');
SELECT inbox_receive('cmg', 'b-1', '{}'::jsonb, group_key => 'b');
SELECT inbox_receive('cmg', 'c-1', '{}'::jsonb, group_key => 'c');
SELECT inbox_receive('cmg', 'c-2', '{}'::jsonb, group_key => 'c');
TRUNCATE regress.batch;
INSERT INTO regress.batch SELECT message_id, receipt FROM inbox_poll('cmg', 10, lease => '1 minute');
SELECT message_id FROM regress.batch ORDER BY 1;
SELECT regress.expire('cmg', 'c-1');
SELECT inbox.forget_front('cmg');
SELECT message_id FROM inbox_poll('cmg', 1, lease => '1 hour');
SELECT * FROM regress.complete_many('cmg', regress.receipts());
SELECT m.group_key, m.message_id, m.position, e.state, e.due IS NOT NULL AS due
FROM inbox.group_members m JOIN inbox.entries e ON e.scope = m.scope AND e.message_id = m.message_id
WHERE m.scope = 'cmg' ORDER BY 1, 3;
SELECT group_key FROM inbox.groups WHERE scope = 'cmg' ORDER BY 1;
-- a-2 is the next take's; c-2 waits behind c-1, which its new owner holds.
SELECT message_id FROM inbox_poll('cmg', 10);

-- Errors of the whole call raise, and complete nothing.
SELECT count(inbox_receive('cm', 'cm-' || g, '{}'::jsonb)) FROM generate_series(10, 11) g;
TRUNCATE regress.batch;
INSERT INTO regress.batch SELECT message_id, receipt FROM inbox_poll('cm', 2, lease => '1 minute')
RETURNING message_id;
SELECT regress.try($$SELECT * FROM inbox_complete_many(NULL, regress.receipts())$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', NULL)$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', '{}')$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', ARRAY[regress.receipts()])$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', regress.receipts() || NULL::uuid)$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', regress.receipts(), ARRAY['{}']::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', regress.receipts(), ARRAY[['{}'], ['{}']]::jsonb[])$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', array_fill(gen_random_uuid(), ARRAY[10001]))$$);
SELECT regress.try($$SELECT * FROM inbox_complete_many('', regress.receipts())$$);
SELECT count(*) AS still_processing FROM inbox.entries e JOIN regress.batch b USING (receipt)
WHERE e.scope = 'cm' AND e.state = 'r';

-- A role with the worker bundle and the scope's grant may complete its
-- messages; one with the bundle and without the grant, or with the grant
-- and without the bundle, may not.
CREATE ROLE inbox_regress_cm_worker;
CREATE ROLE inbox_regress_cm_stranger;
CREATE ROLE inbox_regress_cm_granted;
SELECT inbox_grant_bundle('inbox_regress_cm_worker', 'worker');
SELECT inbox_grant_bundle('inbox_regress_cm_stranger', 'worker');
SELECT inbox_grant('cm', 'inbox_regress_cm_worker');
SELECT inbox_grant('cm', 'inbox_regress_cm_granted');
SET ROLE inbox_regress_cm_stranger;
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', regress.receipts())$$);
SET ROLE inbox_regress_cm_granted;
SELECT regress.try($$SELECT * FROM inbox_complete_many('cm', regress.receipts())$$);
SET ROLE inbox_regress_cm_worker;
SELECT * FROM regress.complete_many('cm', regress.receipts());
RESET ROLE;
SELECT inbox_revoke('cm', 'inbox_regress_cm_worker');
SELECT inbox_revoke('cm', 'inbox_regress_cm_granted');
SELECT inbox_revoke_bundle('inbox_regress_cm_worker', 'worker');
SELECT inbox_revoke_bundle('inbox_regress_cm_stranger', 'worker');
DROP ROLE inbox_regress_cm_worker, inbox_regress_cm_stranger, inbox_regress_cm_granted;

SELECT inbox_drop_scope('cm');
SELECT inbox_drop_scope('cmg');
