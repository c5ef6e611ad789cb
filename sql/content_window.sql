--
-- content_window: inbox_set_content_window and what a window does to
-- claims, receives and batches that carry a payload hash: 'warn' lets a
-- second id of the same content through, counted and listed; 'reject'
-- raises IB007 naming the first id and writes nothing; the window expires,
-- the purge removes what it no longer needs, and scopes without a window
-- are untouched.  Window rows are backdated by hand (as superuser).
--
SET timezone = 'UTC';

-- Bad input: 22023 (22004 for a NULL scope), and nothing is set.
SELECT regress.try($$SELECT inbox_set_content_window('cw', '10 minutes', 'maybe')$$);
SELECT regress.try($$SELECT inbox_set_content_window('cw', '10 minutes', 'WARN')$$);
SELECT regress.try($$SELECT inbox_set_content_window('cw', '1 month', 'warn')$$);
SELECT regress.try($$SELECT inbox_set_content_window('cw', '0', 'warn')$$);
SELECT regress.try($$SELECT inbox_set_content_window('cw', '-5 minutes', 'reject')$$);
SELECT regress.try($$SELECT inbox_set_content_window('cw', '1 day -24 hours', 'reject')$$);
SELECT regress.try($$SELECT inbox_set_content_window('cw', NULL, 'warn')$$);
SELECT regress.try($$SELECT inbox_set_content_window('', '1 minute', 'warn')$$);
SELECT regress.try($$SELECT inbox_set_content_window(NULL, '1 minute', 'warn')$$);
SELECT count(*) FROM inbox.scopes WHERE content_window IS NOT NULL;

-- Set: the window is stored as the span claims measure (days of 24 hours)
SELECT inbox_set_content_window('cw-warn', '1 day', 'warn');
SELECT inbox_set_content_window('cw-reject', '30 minutes', 'warn');
SELECT inbox_set_content_window('cw-reject', '1 hour', 'reject');
SELECT scope, content_window, content_action FROM inbox.scopes
 WHERE content_window IS NOT NULL ORDER BY scope;

--
-- warn: the second id of a content is claimed, counted and listed; a
-- redelivery of either id is an ordinary duplicate; a claim without a hash
-- is never checked.
--
SELECT inbox_claim('cw-warn', 'w1', sha256('order 1'));
SELECT inbox_claim('cw-warn', 'w2', sha256('order 1'));
SELECT inbox_claim('cw-warn', 'w2', sha256('order 1'));
SELECT inbox_claim('cw-warn', 'w1', sha256('order 1'));
SELECT inbox_claim('cw-warn', 'w3', sha256('order 2'));
SELECT inbox_claim('cw-warn', 'w4'), inbox_claim('cw-warn', 'w5');
SELECT scope, message_id, first_message_id, seen_at <= now() AS seen
  FROM inbox_content_duplicates WHERE scope = 'cw-warn' ORDER BY message_id;
SELECT claims, duplicates, content_duplicates FROM inbox_stats WHERE scope = 'cw-warn';

--
-- reject: IB007 names the first id, and nothing of the claim is written;
-- the redelivery of the rejected id is rejected again.
--
SELECT inbox_claim('cw-reject', 'r1', sha256('parcel 7'));
SELECT regress.try_rows($$SELECT inbox_claim('cw-reject', 'r2', sha256('parcel 7'))$$);
SELECT regress.try_rows($$SELECT inbox_claim('cw-reject', 'r2', sha256('parcel 7'))$$);
SELECT * FROM inbox_status('cw-reject', 'r2');
SELECT count(*) FROM inbox_content_duplicates WHERE scope = 'cw-reject';
-- inbox.on_duplicate = raise changes nothing for it; the redelivery of the
-- first id is still IB001
BEGIN;
SET LOCAL inbox.on_duplicate = 'raise';
SELECT regress.try_rows($$SELECT inbox_claim('cw-reject', 'r2', sha256('parcel 7'))$$);
SELECT regress.try_rows($$SELECT inbox_claim('cw-reject', 'r1', sha256('parcel 7'))$$);
COMMIT;
-- A consumer that rejects in a savepoint goes on with its transaction.
\set VERBOSITY terse
BEGIN;
SELECT inbox_claim('cw-reject', 'r3', sha256('parcel 8'));
SAVEPOINT s;
SELECT inbox_claim('cw-reject', 'r4', sha256('parcel 8'));
ROLLBACK TO SAVEPOINT s;
SELECT inbox_claim('cw-reject', 'r5', sha256('parcel 5'));
COMMIT;
\set VERBOSITY default
SELECT message_id, state FROM inbox.entries WHERE scope = 'cw-reject' ORDER BY message_id;
-- A first claim that rolls back leaves its content free.
BEGIN;
SELECT inbox_claim('cw-reject', 'r6', sha256('parcel 6'));
ROLLBACK;
SELECT inbox_claim('cw-reject', 'r7', sha256('parcel 6'));
-- Another scope, or no window, knows nothing of this content.
SELECT inbox_claim('cw-none', 'n1', sha256('parcel 7')), inbox_claim('cw-none', 'n2', sha256('parcel 7'));
SELECT count(*) FROM inbox.content_window WHERE scope = 'cw-none';
SELECT content_duplicates FROM inbox_stats WHERE scope = 'cw-none';

--
-- Receives: the payload's digest is the content when no hash is given.
--
SELECT inbox_receive('cw-reject', 'rv1', '{"parcel": 10}'::jsonb);
SELECT regress.try_rows($$SELECT inbox_receive('cw-reject', 'rv2', '{"parcel": 10}'::jsonb)$$);
SELECT regress.try_rows($$SELECT inbox_receive('cw-reject', 'rv3', 'x'::bytea, sha256('parcel 7'))$$);
SELECT inbox_receive('cw-reject', 'rv1', '{"parcel": 10}'::jsonb);
SELECT inbox_receive('cw-warn', 'wv1', '\x01'::bytea), inbox_receive('cw-warn', 'wv2', '\x01'::bytea);

--
-- Batches: warn marks nothing in the result, reject refuses the batch.
--
SELECT * FROM inbox_claim_many('cw-warn', ARRAY['wb1', 'wb2', 'wb3'],
							   ARRAY[sha256('order 2'), sha256('order 9'), sha256('order 9')]);
SELECT * FROM inbox_receive_many('cw-warn', ARRAY['wr1', 'wr2'], ARRAY['{"a": 1}', '{"a": 1}']::jsonb[]);
SELECT message_id, first_message_id FROM inbox_content_duplicates
 WHERE scope = 'cw-warn' ORDER BY message_id;
SELECT content_duplicates FROM inbox_stats WHERE scope = 'cw-warn';
SELECT * FROM inbox_claim_many('cw-reject', ARRAY['b1', 'b2'], ARRAY[sha256('batch a'), sha256('batch b')]);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('cw-reject', ARRAY['b3', 'b4'],
							   ARRAY[sha256('batch c'), sha256('batch a')])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('cw-reject', ARRAY['b5', 'b6'],
							   ARRAY[sha256('batch d'), sha256('batch d')], 'return')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('cw-reject', ARRAY['rb1'],
							   ARRAY['{"parcel": 10}']::jsonb[])$$);
-- The rejected content last in the batch, both as given and in the order
-- of the hashes that the batch checks its contents in: a check that
-- stopped short of a batch's last item would let it through.
SELECT sha256('batch a') > ALL (ARRAY[sha256('batch e'), sha256('batch f')]) AS last_by_hash;
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('cw-reject', ARRAY['b7', 'b8', 'b9'],
							   ARRAY[sha256('batch e'), sha256('batch f'), sha256('batch a')])$$);
-- A batch's redelivery is ordinary duplicates.
SELECT * FROM inbox_claim_many('cw-reject', ARRAY['b1', 'b2'], ARRAY[sha256('batch a'), sha256('batch b')]);

--
-- Expiry: a content first seen longer ago than the window is a fresh
-- first, under its new id.
--
UPDATE inbox.content_window SET seen_at = seen_at - interval '61 minutes', expires_at = expires_at - interval '61 minutes'
 WHERE scope = 'cw-reject' AND message_id = 'r1';
SELECT inbox_claim('cw-reject', 'r8', sha256('parcel 7'));
SELECT message_id FROM inbox.content_window WHERE scope = 'cw-reject' AND payload_hash = sha256('parcel 7');
SELECT regress.try_rows($$SELECT inbox_claim('cw-reject', 'r9', sha256('parcel 7'))$$);

--
-- A new window moves when the contents already seen expire: they count
-- for the new span from when they were seen.
--
SELECT inbox_set_content_window('cw-reject', '2 hours', 'reject');
SELECT bool_and(expires_at = seen_at + interval '2 hours') AS moved
  FROM inbox.content_window WHERE scope = 'cw-reject';
SELECT inbox_set_content_window('cw-reject', '1 hour', 'reject');
SELECT bool_and(expires_at = seen_at + interval '1 hour') AS moved_back
  FROM inbox.content_window WHERE scope = 'cw-reject';

--
-- The purge: content rows past their window go, listed duplicates go once
-- past their scope's retention.
--
UPDATE inbox.content_window SET seen_at = seen_at - interval '2 hours', expires_at = expires_at - interval '2 hours'
 WHERE scope = 'cw-reject' AND message_id IN ('r8', 'b1');
UPDATE inbox.content_duplicates SET seen_at = seen_at - interval '8 days', expires_at = expires_at - interval '8 days'
 WHERE scope = 'cw-warn' AND message_id = 'w2';
SELECT inbox_purge() >= 0 AS purged;
SELECT message_id FROM inbox.content_window WHERE scope = 'cw-reject' ORDER BY message_id;
SELECT message_id FROM inbox_content_duplicates WHERE scope = 'cw-warn' ORDER BY message_id;

--
-- The content's row is written without the planner (src/window.c) only
-- into inbox.content_window as sql/inbox.sql makes it: a table with a
-- CHECK or a trigger more takes the statement, which enforces them, as
-- it does with inbox.direct_insert = off.  Each case is rolled back; the
-- failing rows' timestamps are left out of the errors shown.
--
SELECT inbox_set_content_window('cw-guard', '1 hour', 'warn');
BEGIN;
ALTER TABLE inbox.content_window ADD CONSTRAINT content_window_test CHECK (message_id <> 'refused');
SELECT regexp_replace(regress.try_rows($$SELECT inbox_claim('cw-guard', 'refused', sha256('guard 1'))$$), ' \[Failing row .*\]', '') AS claim;
SELECT regexp_replace(regress.try_rows($$SELECT * FROM inbox_claim_many('cw-guard', ARRAY['refused'], ARRAY[sha256('guard 2')])$$), ' \[Failing row .*\]', '') AS claim_many;
SELECT regexp_replace(regress.try_rows($$SELECT inbox_receive('cw-guard', 'refused', '{"guard": 3}'::jsonb)$$), ' \[Failing row .*\]', '') AS receive;
SELECT inbox_claim('cw-guard', 'accepted', sha256('guard 4'));
SET LOCAL inbox.direct_insert = off;
SELECT regexp_replace(regress.try_rows($$SELECT inbox_claim('cw-guard', 'refused', sha256('guard 5'))$$), ' \[Failing row .*\]', '') AS claim_off;
ROLLBACK;
BEGIN;
CREATE FUNCTION regress.content_row_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE NOTICE 'content row of %', NEW.message_id;
	RETURN NEW;
END $$;
CREATE TRIGGER content_row_seen BEFORE INSERT ON inbox.content_window
	FOR EACH ROW EXECUTE FUNCTION regress.content_row_seen();
SELECT inbox_claim('cw-guard', 'triggered', sha256('guard 6'));
ROLLBACK;
-- As made, the row is written again, and a second id of its content is
-- found by the statement
SELECT inbox_claim('cw-guard', 'g1', sha256('guard 7')), inbox_claim('cw-guard', 'g2', sha256('guard 7'));
SELECT message_id, expires_at = seen_at + interval '1 hour' AS expires
  FROM inbox.content_window WHERE scope = 'cw-guard';
SELECT message_id, first_message_id FROM inbox_content_duplicates WHERE scope = 'cw-guard';
SELECT inbox_drop_scope('cw-guard') > 0 AS dropped;

--
-- Off: the contents are forgotten, and claims go on as without a window.
--
SELECT inbox_set_content_window('cw-reject', NULL, NULL);
SELECT count(*) FROM inbox.content_window WHERE scope = 'cw-reject';
SELECT inbox_claim('cw-reject', 'r10', sha256('parcel 8'));
SELECT inbox_set_content_window('cw-warn', '1 day', 'off');
SELECT scope, content_window, content_action FROM inbox.scopes WHERE content_window IS NOT NULL;
SELECT inbox_claim('cw-warn', 'w6', sha256('order 2'));
-- inbox_drop_scope takes the listed duplicates with it.
SELECT inbox_drop_scope('cw-warn') > 0 AS dropped;
SELECT count(*) FROM inbox.content_duplicates WHERE scope = 'cw-warn';
