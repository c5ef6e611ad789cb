--
-- headers: a received message keeps its headers for the worker that
-- takes it (inbox_receive, inbox_receive_many, inbox_take, inbox_poll),
-- checked as an outbox message's are; and a send copies the caller's
-- trace context (inbox.traceparent, inbox.tracestate) into its headers.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- Received with headers, taken with them: the last column of the takes
SELECT inbox_receive('hdr', 'a', '{"n": 1}'::jsonb,
					 headers => '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant": "acme"}');
SELECT inbox_receive('hdr', 'b', '\x01'::bytea, headers => '{"content-type": "application/x-protobuf"}');
SELECT inbox_receive('hdr', 'c', '{"n": 3}'::jsonb);
SELECT inbox_receive('hdr', 'd', '{"n": 4}'::jsonb, NULL, NULL, NULL, 2, '{"p": "ranked"}');
BEGIN;
SELECT message_id, group_key, headers FROM inbox_take('hdr', 10) ORDER BY message_id;
ROLLBACK;
BEGIN;
SELECT message_id, headers FROM inbox_poll('hdr', 10) ORDER BY message_id;
ROLLBACK;
-- The last column, after group_key
SELECT (SELECT array_agg(a ORDER BY n) FROM unnest(p.proargnames) WITH ORDINALITY AS u(a, n)
		 WHERE p.proargmodes[n] = 't') AS take_columns
  FROM pg_proc p WHERE p.oid = 'inbox_take(text, integer, interval)'::regprocedure;

-- A batch: one element per id, NULL for none; with groups and priorities
SELECT * FROM inbox_receive_many('hdr-many', ARRAY['m1', 'm2', 'm3'], ARRAY['{}', '{}', '{}']::jsonb[],
								 headers => ARRAY['{"h": "1"}', NULL, '{"h": "3"}']::jsonb[]);
SELECT * FROM inbox_receive_many('hdr-many', ARRAY['m4', 'm5'], ARRAY['\x04', '\x05']::bytea[],
								 group_keys => ARRAY['g', 'g'], priorities => ARRAY[0, 1],
								 headers => ARRAY['{"h": "4"}', '{"h": "5"}']::jsonb[]);
SELECT message_id, headers FROM inbox.entries WHERE scope = 'hdr-many' ORDER BY message_id;
-- A duplicate keeps the headers it was first received with
SELECT * FROM inbox_receive_many('hdr-many', ARRAY['m1'], ARRAY['{}']::jsonb[],
								 headers => ARRAY['{"h": "other"}']::jsonb[]);
SELECT headers FROM inbox.entries WHERE scope = 'hdr-many' AND message_id = 'm1';
-- NULL headers, or none, cost a batch nothing: the stored column is NULL
SELECT * FROM inbox_receive_many('hdr-many', ARRAY['m6'], ARRAY['{}']::jsonb[], headers => NULL);
SELECT headers IS NULL AS none FROM inbox.entries WHERE scope = 'hdr-many' AND message_id = 'm6';

-- The arrays' lengths must match
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('hdr-many', ARRAY['x1', 'x2'], ARRAY['{}', '{}']::jsonb[],
	headers => ARRAY['{}']::jsonb[])$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('hdr-many', ARRAY['x1'], ARRAY['{}']::jsonb[],
	headers => ARRAY['{}', '{}']::jsonb[])$$);

-- Headers as an outbox message's: an object of strings, token names of at
-- most 255 bytes, values without CR, LF or NUL; nothing written
SELECT regress.try_rows($$SELECT inbox_receive('hdr', 'bad', '{}'::jsonb, headers => '[1]')$$);
SELECT regress.try_rows($$SELECT inbox_receive('hdr', 'bad', '{}'::jsonb, headers => '{"n": 1}')$$);
SELECT regress.try_rows($$SELECT inbox_receive('hdr', 'bad', '{}'::jsonb, headers => '{"a b": "x"}')$$);
SELECT regress.try_rows($$SELECT inbox_receive('hdr', 'bad', '{}'::jsonb, headers => '{"a": "x\ny"}')$$);
SELECT regress.try_rows(format($$SELECT inbox_receive('hdr', 'bad', '{}'::jsonb, headers => '{"%s": "x"}')$$,
							   repeat('n', 256)));
SELECT regress.try_rows($$SELECT inbox_receive('hdr', 'bad', '\x00'::bytea, headers => '{"a": "x\r"}')$$);
SELECT regress.try_rows($$SELECT * FROM inbox_receive_many('hdr-many', ARRAY['x1', 'x2'], ARRAY['{}', '{}']::jsonb[],
	headers => ARRAY['{"ok": "1"}', '{"bad": 2}']::jsonb[])$$);
-- 255 bytes is the longest name
SELECT inbox_receive('hdr', 'long', '{}'::jsonb, headers => jsonb_build_object(repeat('n', 255), 'v'));
SELECT length((SELECT k FROM jsonb_object_keys(headers) AS k)) FROM inbox.entries
 WHERE scope = 'hdr' AND message_id = 'long';

-- Trace context: the settings, set per transaction, go into a send's headers
SELECT outbox_route('traced', 'amqp://broker/vhost');
BEGIN;
SET LOCAL inbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL inbox.tracestate = 'rojo=00f067aa0ba902b7, congo=t61rcWkgMzE';
SELECT outbox_send('traced', 'k', '{"n": 1}'::jsonb) IS NOT NULL AS sent;
SELECT outbox_send('traced', 'k', '{"n": 2}'::jsonb, '{"x-other": "1"}') IS NOT NULL AS sent;
-- An explicit traceparent wins, in any case, and takes no tracestate from the settings
SELECT outbox_send('traced', 'k', '{"n": 3}'::jsonb,
				   '{"TraceParent": "00-11111111111111111111111111111111-2222222222222222-00"}') IS NOT NULL AS sent;
-- An explicit tracestate wins over the setting's
SELECT outbox_send('traced', 'k', '{"n": 4}'::jsonb, '{"tracestate": "mine=1"}') IS NOT NULL AS sent;
SELECT outbox_send_many('traced', ARRAY['k', 'k'], ARRAY['{"n": 5}', '{"n": 6}']::jsonb[]) IS NOT NULL AS sent;
SELECT outbox_send('traced', 'k', '\x07'::bytea, id => '018f0000-0000-7000-8000-000000000007') IS NOT NULL AS sent;
COMMIT;
-- A retry with its id under another trace is the same message, which keeps
-- the first send's trace context; other headers or content are IB002
BEGIN;
SET LOCAL inbox.traceparent = '00-99999999999999999999999999999999-00f067aa0ba902b7-01';
SELECT outbox_send('traced', 'k', '\x07'::bytea, id => '018f0000-0000-7000-8000-000000000007')
	= '018f0000-0000-7000-8000-000000000007' AS same;
SELECT left(regress.try($$SELECT outbox_send('traced', 'k', '\x07'::bytea, '{"x-other": "1"}',
											  id => '018f0000-0000-7000-8000-000000000007')$$), 60);
COMMIT;
SELECT outbox_send('traced', 'k', '\x07'::bytea, id => '018f0000-0000-7000-8000-000000000007')
	= '018f0000-0000-7000-8000-000000000007' AS same;
-- Gone after COMMIT: the next transaction's sends carry nothing
SELECT current_setting('inbox.traceparent') = '' AS unset;
SELECT outbox_send('traced', 'k', '{"n": 8}'::jsonb) IS NOT NULL AS sent;
SELECT coalesce(m.payload ->> 'n', encode(m.payload_bytes, 'hex')) AS n, m.headers
  FROM inbox.outbox_messages m WHERE m.topic = 'traced' ORDER BY m.position;
-- set_config(..., true) is SET LOCAL
BEGIN;
SELECT set_config('inbox.traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00', true) IS NOT NULL AS set;
SELECT outbox_send('traced', 'k2', '{"n": 9}'::jsonb) IS NOT NULL AS sent;
COMMIT;
SELECT m.headers FROM inbox.outbox_messages m WHERE m.topic = 'traced' AND m.key = 'k2';
-- Leave the outbox as the outbox tests expect it
SELECT outbox_unroute('traced', 'amqp://broker/vhost');
DELETE FROM inbox.outbox_messages WHERE topic = 'traced';
DELETE FROM inbox.outbox_keys WHERE topic = 'traced';

-- An invalid setting is refused when set (22023)
SELECT left(regress.try($$SET inbox.traceparent = '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01'$$), 72);
SELECT left(regress.try($$SET inbox.traceparent = '00-00000000000000000000000000000000-00f067aa0ba902b7-01'$$), 72);
SELECT left(regress.try($$SET inbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'$$), 72);
SELECT left(regress.try($$SET inbox.traceparent = '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'$$), 72);
SELECT left(regress.try($$SET inbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-'$$), 72);
SELECT left(regress.try($$SET inbox.traceparent = E'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n'$$), 72);
SELECT left(regress.try($$SET inbox.tracestate = 'Upper=1'$$), 72);
SELECT left(regress.try($$SET inbox.tracestate = 'a=b=c'$$), 72);
SELECT left(regress.try($$SET inbox.tracestate = E'a=1\r\nx-injected: 1'$$), 72);
SELECT left(regress.try(format($$SET inbox.tracestate = 'a=%s'$$, repeat('v', 257))), 72);
SELECT left(regress.try(format($$SET inbox.tracestate = '%s'$$,
						  (SELECT string_agg('k' || i || '=v', ',') FROM generate_series(1, 33) i))), 72);
SELECT left(regress.try(format($$SET inbox.tracestate = '%s'$$,
						  (SELECT string_agg('k' || i || '=' || repeat('v', 60), ',') FROM generate_series(1, 9) i))), 72);
-- Valid: multi-tenant keys, empty list-members, the longest
SELECT regress.try($$SET LOCAL inbox.tracestate = 'tenant@vendor=1,, a_b-c*d/e=x y'$$);
SELECT regress.try(format($$SET LOCAL inbox.tracestate = '%s'$$,
						  (SELECT string_agg('k' || i || '=v', ',') FROM generate_series(1, 32) i)));
SELECT regress.try($$SET LOCAL inbox.traceparent = ''$$);
-- The detail and the hint
SET inbox.traceparent = 'nope';
