--
-- outbox_checks: what no target can carry is refused at the send (control
-- characters in topics and keys, headers other than a flat object of
-- strings with token names and values without line breaks), arrays are
-- one-dimensional, and a topic's reservation holds for outbox_requeue and
-- for the id check of outbox_send.
--
SELECT outbox_route('checks', 'https://hooks.example/checks', '{"max_attempts": 1}');
SELECT count(*) AS before FROM inbox.outbox_messages \gset

-- Control characters in keys and topics: C0, DEL and C1, in every form
SELECT regress.try($$SELECT outbox_send('checks', E'k\r\nX-Injected: 1', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('checks', E'k\x01', '\x00'::bytea)$$);
SELECT regress.try($$SELECT outbox_send('checks', E'k\x7f', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('checks', E'k\u0085', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send(E'check\ts', 'k', '{}'::jsonb)$$);
SELECT regress.try($$SELECT outbox_send('checks', E'k\n', '{}'::jsonb, NULL, '00000000-0000-7000-8000-0000000000c1')$$);
SELECT regress.try($$SELECT outbox_send_many('checks', ARRAY['ok', E'bad\n'], ARRAY['{}', '{}']::jsonb[])$$);
SELECT regress.try($$SELECT outbox_route(E'checks\n', 'https://hooks.example/checks')$$);

-- Headers: a JSON object of strings
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '["X-Trace", "a"]')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '"X-Trace: a"')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, 'null')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Count": 1}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Trace": {"a": "b"}}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Trace": ["a"]}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Trace": null}')$$);
-- names: RFC 9110 tokens of at most 255 bytes
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, jsonb_build_object(repeat('h', 256), 'v'))$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"": "v"}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X Trace": "v"}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Trace:": "v"}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Zoë": "v"}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, jsonb_build_object(E'X-Trace\r\nX-Injected', 'v'))$$);
-- values: no CR, LF or NUL (jsonb holds no NUL: it refuses \u0000 itself)
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, jsonb_build_object('X-Trace', E'a\r\nX-Injected: 1'))$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Trace": "a\nb"}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"X-Trace": "a\rb"}')$$);
SELECT regress.try($$SELECT '{"X-Trace": "a\u0000b"}'::jsonb$$);
-- every form of the send checks them
SELECT regress.try($$SELECT outbox_send('checks', 'k', '\x00'::bytea, '{"X-Trace": "a\rb"}')$$);
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{}'::jsonb, '{"a b": "v"}', '00000000-0000-7000-8000-0000000000c1')$$);
SELECT regress.try($$SELECT outbox_send_many('checks', ARRAY['k'], ARRAY['{}']::jsonb[], '{"X-Count": 1}')$$);
SELECT count(*) - :before AS written FROM inbox.outbox_messages;

-- What passes: a key of 1,024 bytes in any printable text; header names
-- of 255 bytes and every tchar; values with tabs, non-ASCII text, or empty
SELECT key_bytes FROM inbox.outbox_limits();
SELECT outbox_send('checks', repeat('é', 512), '{}'::jsonb) IS NOT NULL AS sent;
SELECT outbox_send('checks', 'k', '{}'::jsonb,
				   jsonb_build_object(repeat('h', 255), 'v', 'X-Trace', E'tab\there, Zoë ',
									  '!#$%&''*+-.^_`|~09azAZ', '')) IS NOT NULL AS sent;
SELECT outbox_send('checks', 'k', '\x00'::bytea, '{}') IS NOT NULL AS sent;
SELECT cardinality(outbox_send_many('checks', ARRAY['k', 'k-2'], ARRAY['{}', '{}']::jsonb[],
									 '{"X-Trace": "batch"}')) AS sent;
SELECT octet_length(key), headers IS NOT NULL AS with_headers FROM inbox.outbox_messages
 WHERE topic = 'checks' ORDER BY 1, 2;

-- Arrays are one-dimensional: a matrix is not flattened into a list
SELECT regress.try($$SELECT outbox_send_many('checks', ARRAY[['a', 'b'], ['c', 'd']],
											 ARRAY['{}', '{}', '{}', '{}']::jsonb[])$$);
SELECT regress.try($$SELECT outbox_send_many('checks', ARRAY['a', 'b', 'c', 'd'],
											 ARRAY[['{}', '{}'], ['{}', '{}']]::jsonb[])$$);
SELECT regress.try($$SELECT outbox_ack_many(ARRAY[[gen_random_uuid()], [gen_random_uuid()]])$$);
SELECT regress.try($$SELECT inbox_receive_many('checks', ARRAY[['a'], ['b']], ARRAY[['{}'], ['{}']]::jsonb[])$$);
SELECT count(*) AS written FROM inbox.outbox_messages WHERE topic = 'checks' AND key IN ('a', 'b', 'c', 'd');

-- Reservations.  Topic 'reserved' is granted to inbox_checks_owner only;
-- its message dies.  An operator not granted it sees no dead letter of
-- it, and requeueing it is answered as for an id that does not exist.
CREATE ROLE inbox_checks_owner;
CREATE ROLE inbox_checks_operator;
CREATE ROLE inbox_checks_publisher;
SELECT inbox_grant_bundle('inbox_checks_operator', 'operator');
SELECT inbox_grant_bundle('inbox_checks_publisher', 'publisher');
SELECT inbox_grant('reserved', 'inbox_checks_owner');
SELECT outbox_route('reserved', 'https://hooks.example/checks', '{"max_attempts": 1}');
SELECT outbox_send('reserved', 'hidden-key', '{"n": 1}'::jsonb, NULL, '00000000-0000-7000-8000-0000000000d1') AS id;
SELECT key, outbox_fail(receipt, 'HTTP 410') FROM outbox_fetch('https://hooks.example/checks', 10, '1 minute')
 WHERE topic = 'reserved';
SET ROLE inbox_checks_operator;
SELECT count(*) AS visible FROM outbox_dead_letters WHERE topic = 'reserved';
SELECT regress.try($$SELECT outbox_requeue('00000000-0000-7000-8000-0000000000d1')$$);
SELECT regress.try($$SELECT outbox_requeue('00000000-0000-7000-8000-0000000000d9')$$);
RESET ROLE;
SELECT state FROM inbox.outbox_deliveries WHERE id = '00000000-0000-7000-8000-0000000000d1';
-- Granted the topic, the operator requeues it
SELECT inbox_grant('reserved', 'inbox_checks_operator');
SET ROLE inbox_checks_operator;
SELECT count(*) AS visible FROM outbox_dead_letters WHERE topic = 'reserved';
SELECT outbox_requeue('00000000-0000-7000-8000-0000000000d1') AS requeued;
RESET ROLE;
SELECT inbox_revoke('reserved', 'inbox_checks_operator');

-- A caller's id already sent to another topic: IB002 names neither that
-- topic nor its key, whoever calls; sent to the caller's own topic, the
-- detail names the key
SET ROLE inbox_checks_publisher;
SELECT regress.try($$SELECT outbox_send('checks', 'k', '{"n": 1}'::jsonb, NULL, '00000000-0000-7000-8000-0000000000d1')$$);
SELECT regress.try($$SELECT outbox_send('reserved', 'hidden-key', '{"n": 2}'::jsonb, NULL, '00000000-0000-7000-8000-0000000000d1')$$);
RESET ROLE;
SELECT regress.try($$SELECT outbox_send('reserved', 'hidden-key', '{"n": 2}'::jsonb, NULL, '00000000-0000-7000-8000-0000000000d1')$$);

SELECT inbox_revoke('reserved', 'inbox_checks_owner');
SELECT inbox_revoke_bundle('inbox_checks_operator', 'operator');
SELECT inbox_revoke_bundle('inbox_checks_publisher', 'publisher');
DROP ROLE inbox_checks_owner;
DROP ROLE inbox_checks_operator;
DROP ROLE inbox_checks_publisher;
SELECT outbox_unroute('reserved', 'https://hooks.example/checks');
SELECT outbox_unroute('checks', 'https://hooks.example/checks');
