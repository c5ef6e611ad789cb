--
-- claim_many: inbox_claim_many claims a batch with the arbitration of
-- inbox_claim for each id: one row per id given, in the order given.
--
SELECT * FROM inbox_claim_many('many', ARRAY['b-1', 'b-2', 'b-3'],
                               ARRAY['\x01', '\x02', '\x03']::bytea[]);
-- A redelivered batch: every id is a duplicate, and nothing is written.
SELECT * FROM inbox_claim_many('many', ARRAY['b-3', 'b-1'], ARRAY['\x03', '\x01']::bytea[]);
-- New and old ids together; an id twice in the batch is claimed once.
SELECT * FROM inbox_claim_many('many', ARRAY['b-4', 'b-2', 'b-4', 'b-5'],
                               ARRAY['\x04', '\x02', '\x04', NULL]::bytea[]);
-- Without hashes there is no content check.
SELECT * FROM inbox_claim_many('many', ARRAY['b-6', 'b-1']);
SELECT message_id, payload_hash FROM inbox.entries WHERE scope = 'many' ORDER BY 1;

-- A mismatch raises IB002 for the whole call, which writes nothing...
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['b-7', 'b-1'], ARRAY['\x07', '\xff']::bytea[])$$);
-- ... also between two copies of a new id in the same batch.
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['b-8', 'b-8'], ARRAY['\x08', '\x09']::bytea[])$$);
-- on_mismatch => 'return' claims the rest and reports the mismatches.
SELECT * FROM inbox_claim_many('many', ARRAY['b-7', 'b-1', 'b-9', 'b-9', 'b-1'],
                               ARRAY['\x07', '\xff', '\x09', '\x0a', '\xff']::bytea[],
                               on_mismatch => 'return');
-- A later copy is checked against what the entry holds, not against the
-- first copy: after a copy that mismatches b-1's stored hash (\x01), a copy
-- with \x01 is a duplicate, and one without a hash too.
SELECT * FROM inbox_claim_many('many', ARRAY['b-1', 'b-1', 'b-1'],
                               ARRAY['\xfe', '\x01', NULL]::bytea[],
                               on_mismatch => 'return');

-- One statement: the business rows of exactly the claimed ids.
CREATE TABLE batch_orders (message_id text PRIMARY KEY);
INSERT INTO batch_orders
SELECT c.message_id FROM inbox_claim_many('many', ARRAY['b-10', 'b-1', 'b-11']) AS c
 WHERE c.status = 'claimed';
SELECT * FROM batch_orders ORDER BY 1;
DROP TABLE batch_orders;
-- The README's batch consumer joins payloads by position: an id twice in
-- the batch gets one business row (a join on the id would give two).
CREATE TABLE batch_invoices (message_id text, amount numeric);
INSERT INTO batch_invoices (message_id, amount)
SELECT c.message_id, (m.payload->>'amount')::numeric
  FROM inbox_claim_many('many', ARRAY['b-12', 'b-12', 'b-13'], NULL) AS c
  JOIN unnest(ARRAY['b-12', 'b-12', 'b-13'],
              ARRAY['{"amount": 5}', '{"amount": 5}', '{"amount": 7}']::jsonb[])
       WITH ORDINALITY AS m(id, payload, ord)
    ON m.ord = c.ordinality
 WHERE c.status = 'claimed';
SELECT * FROM batch_invoices ORDER BY 1;
DROP TABLE batch_invoices;

-- The counters saw every decision.
SELECT claims, duplicates, mismatches FROM inbox_stats WHERE scope = 'many';

-- A mismatch raised writes no row and counts no claim, only the mismatch:
-- against a stored entry, and between two copies of a new id (which a
-- batch that wrote its first copy before raising would count).
CREATE TEMP TABLE counted AS
SELECT claims, duplicates, mismatches FROM inbox_stats WHERE scope = 'many';
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['b-2'], ARRAY['\xff']::bytea[])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['b-20', 'b-20'], ARRAY['\x20', '\x21']::bytea[])$$);
SELECT s.claims - c.claims AS claims, s.duplicates - c.duplicates AS duplicates,
       s.mismatches - c.mismatches AS mismatches
  FROM inbox_stats AS s, counted AS c WHERE s.scope = 'many';
SELECT count(*) AS written FROM inbox.entries WHERE scope = 'many' AND message_id = 'b-20';
SELECT payload_hash FROM inbox.entries WHERE scope = 'many' AND message_id = 'b-2';
DROP TABLE counted;

--
-- Bad input: a clear SQLSTATE, and nothing written.
--
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', NULL)$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many(NULL, ARRAY['x-1'])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', '{}')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1', NULL])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1', ''])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1', repeat('x', 1025)])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1', 'x-2'], ARRAY['\x01']::bytea[])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1'], ARRAY['']::bytea[])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1'], ARRAY[decode(repeat('ab', 65), 'hex')])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY[['x-1'], ['x-2']])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1'], on_mismatch => 'ignore')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY['x-1'], on_mismatch => NULL)$$);
-- At most 10,000 ids in one call
SELECT regress.try_rows($$SELECT * FROM inbox_claim_many('many', ARRAY(SELECT 'x-' || g FROM generate_series(1, 10001) g))$$);
SELECT count(*) FROM inbox_claim_many('many', ARRAY(SELECT 'y-' || g FROM generate_series(1, 10000) g));
SELECT inbox_drop_scope('many') > 0 AS dropped;
