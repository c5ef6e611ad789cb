--
-- errors: every bad input is refused with its SQLSTATE, before anything is
-- written (try_rows reports how many entries a call added: always +0)
--
SET timezone = 'UTC';

-- NULL keys: 22004, naming the argument.  The functions are deliberately
-- not STRICT, which would turn a NULL key into a NULL "claimed" result.
SELECT regress.try_rows($$SELECT inbox_claim(NULL, 'm1')$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', NULL)$$);
SELECT regress.try_rows($$SELECT inbox_claim(NULL, NULL, NULL)$$);
SELECT regress.try_rows($$SELECT inbox_claim(NULL::text, 'm1', sha256('x'))$$);
SELECT inbox_claim(NULL, 'm1');
\echo :LAST_ERROR_SQLSTATE

-- Empty keys: 22023.
SELECT regress.try_rows($$SELECT inbox_claim('', 'm1')$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', '')$$);

-- Too long: 22001.  Limits are in bytes: scope 256, message_id 1024.
SELECT regress.try_rows($$SELECT inbox_claim(repeat('s', 256), 'at-limit')$$);
SELECT regress.try_rows($$SELECT inbox_claim(repeat('s', 257), 'over-limit')$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', repeat('m', 1024))$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', repeat('m', 1025))$$);
-- 512 two-byte characters are 1024 bytes; one more is over.
SELECT regress.try_rows($$SELECT inbox_claim('s', repeat('é', 512))$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', repeat('é', 513))$$);
SELECT inbox_claim('s', repeat('m', 1025));
\echo :LAST_ERROR_SQLSTATE
-- A huge (toasted, compressed) id is refused without trouble.
SELECT regress.try_rows($$SELECT inbox_claim('s', repeat('m', 50000000))$$);

-- Payload hash: NULL is allowed (no content check); empty is 22023; more
-- than 64 bytes is 22001 (a digest is expected, not the payload).
SELECT regress.try_rows($$SELECT inbox_claim('s', 'h1', NULL)$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', 'h2', ''::bytea)$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', 'h3', sha512('x'))$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', 'h4', sha512('x') || '\x00'::bytea)$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', 'h5', '\x00'::bytea)$$);

-- Wrong types are refused by PostgreSQL's own resolution (42883).
SELECT regress.try_rows($$SELECT inbox_claim(1, 2)$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', 'm', 'not a hash'::text)$$);

-- Invalid UTF-8 never reaches the extension: PostgreSQL rejects it when the
-- value is built (22021), so there is nothing to claim and no row.
SELECT regress.try_rows($$SELECT inbox_claim('s', convert_from('\xc328'::bytea, 'UTF8'))$$);
SELECT regress.try_rows($$SELECT inbox_claim(convert_from('\xff'::bytea, 'UTF8'), 'm')$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', E'\xff\xfe')$$);
SELECT regress.try_rows($$SELECT inbox_claim('s', 'bad' || chr(0))$$);

--
-- Messages quote caller strings safely: quotes, backslashes, format
-- characters and line breaks cannot break or forge a log line.
--
SET inbox.on_duplicate = raise;
SELECT inbox_claim('s', E'quote" back\\slash %s %n %% ''single''');
SELECT regress.try($$SELECT inbox_claim('s', E'quote" back\\slash %s %n %% ''single''')$$);
SELECT inbox_claim('s', E'line\nLOG:  forged\r\ttab\x01');
SELECT regress.try($$SELECT inbox_claim('s', E'line\nLOG:  forged\r\ttab\x01')$$);
-- Bidirectional overrides and C1 controls are shown as \uNNNN; ordinary
-- non-ASCII letters stay readable.
SELECT inbox_claim(U&'scope\202E', U&'caf\00E9 \0085 \2028');
SELECT regress.try($$SELECT inbox_claim(U&'scope\202E', U&'caf\00E9 \0085 \2028')$$);
RESET inbox.on_duplicate;
-- The stored keys are the caller's bytes, unchanged.
SELECT message_id = E'line\nLOG:  forged\r\ttab\x01' AS stored_verbatim
FROM inbox.entries WHERE scope = 's' AND message_id LIKE 'line%';

-- inbox_distribute is for Citus only, and says so.
SELECT regress.try($$SELECT inbox_distribute('pg_class')$$);

-- Nothing above left a partial or extra row.
SELECT octet_length(scope) AS scope_bytes,
	   left(regexp_replace(message_id, '[^a-z0-9 ]', '?', 'g'), 12) AS message_id,
	   octet_length(message_id) AS bytes, octet_length(payload_hash) AS hash_bytes, state
FROM inbox.entries WHERE scope IN ('s', repeat('s', 256)) OR scope LIKE 'scope%'
ORDER BY 1, 2, 3;
