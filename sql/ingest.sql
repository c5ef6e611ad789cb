--
-- ingest: what a subscription may hold (the source schemes the relay
-- reads, each scheme's URL parameters and the subscription options, never
-- a secret however it is written), subscribing and unsubscribing, the
-- view inbox_subscriptions, and the rejects: recorded by the relay's
-- bundle, shown to the operators of the scope, removed by
-- inbox_ingest_forget.  The notification of subscription changes is the
-- isolation spec ingest_notify.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- The one list of source schemes, parameters and options
SELECT scheme, parameters, required, options FROM inbox_source_schemes() ORDER BY scheme;

-- Only URLs of the schemes the relay reads
SELECT regress.try(format('SELECT inbox_subscribe(%L, %L)', 'orders', u))
  FROM unnest(ARRAY[
	NULL,
	'rabbit.example/v?queue=q',
	'amqp:rabbit.example?queue=q',
	'AMQP://rabbit.example/v?queue=q',
	'sqs://sqs.example/orders?group=g',
	'https://hooks.example/x?queue=q',
	'amqp://rabbit.example/v?queue=a b',
	'amqp://rabbit.example/v?queue=q' || chr(10)]) AS u;

-- The queue is required, and every parameter is one the scheme reads,
-- written as listed, once, and not empty
SELECT regress.try(format('SELECT inbox_subscribe(%L, %L)', 'orders', u))
  FROM unnest(ARRAY[
	'amqp://rabbit.example/v',
	'amqp://rabbit.example/v?queue=',
	'amqp://rabbit.example/v?queue',
	'amqp://rabbit.example/v?Queue=q',
	'amqp://rabbit.example/v?queue=q&queue=r',
	'amqp://rabbit.example/v?queue=q&cacert=/etc/ca.pem',
	'amqp://rabbit.example/v?queue=q&exchange=x',
	'amqps://rabbit.example/v?cacert=/etc/ca.pem']) AS u;

-- Secrets, however written: in the user information, or as a parameter
-- or option by any name of a secret, in any case, percent-encoded
SELECT regress.try(format('SELECT inbox_subscribe(%L, %L, %L)', 'orders', u, o))
  FROM (VALUES
	('amqp://app:s3cret@rabbit.example/v?queue=q', NULL),
	('amqp://app:@rabbit.example/v?queue=q', NULL),
	('amqp://rabbit.example/v?queue=q&password=x', NULL),
	('amqp://rabbit.example/v?queue=q&%70assword=x', NULL),
	('amqps://rabbit.example/v?queue=q&API_KEY=x', NULL),
	('amqp://rabbit.example/v?queue=q', '{"token": "x"}'),
	('amqp://rabbit.example/v?queue=q', '{"Secret": "x"}')) AS t(u, o);

-- Options: only those listed, each of one type and in its range
SELECT regress.try(format('SELECT inbox_subscribe(%L, %L, %L)', 'orders', 'amqp://rabbit.example/v?queue=q', o))
  FROM unnest(ARRAY[
	'[]', '"x"', '{"prefetch": 10}',
	'{"max_attempts": 0}', '{"max_attempts": "5"}', '{"max_attempts": 2.5}', '{"max_attempts": 99999999999}',
	'{"batch": 0}', '{"batch": 1001}', '{"batch": "10"}',
	'{"message_id_header": ""}', '{"message_id_header": "x id"}', '{"message_id_header": 1}',
	'{"group_key": "key"}', '{"group_key": "header:"}', '{"group_key": null}',
	'{"max_attempts": 1, "batch": 1000, "message_id_header": "x-msg-id", "group_key": "header:tenant"}',
	'{"batch": 1, "group_key": "routing_key"}']) AS o;

-- The scope is checked as every scope is
SELECT regress.try($$SELECT inbox_subscribe(NULL, 'amqp://rabbit.example/v?queue=q')$$);
SELECT regress.try($$SELECT inbox_subscribe('', 'amqp://rabbit.example/v?queue=q')$$);

-- A subscription, its options changed in place (an upsert), another on an
-- amqps source; the view lists them
SELECT inbox_subscribe('orders', 'amqp://rabbit.example/v?queue=orders');
SELECT inbox_subscribe('orders', 'amqp://rabbit.example/v?queue=orders', '{"batch": 10}');
SELECT inbox_subscribe('billing', 'amqps://app@rabbit.example/v?queue=billing&cacert=/etc/ca.pem',
					   '{"group_key": "routing_key", "max_attempts": 3}');
SELECT scope, source, options, created_at <= now() AS created FROM inbox_subscriptions ORDER BY 1, 2;

-- Unsubscribing: an unknown subscription is 42704
SELECT inbox_unsubscribe('orders', 'amqp://rabbit.example/v?queue=orders');
SELECT regress.try($$SELECT inbox_unsubscribe('orders', 'amqp://rabbit.example/v?queue=orders')$$);
SELECT regress.try($$SELECT inbox_unsubscribe('orders', NULL)$$);
SELECT scope, source FROM inbox_subscriptions ORDER BY 1, 2;

-- Subscribing is the owner's: no bundle holds it
CREATE ROLE regress_ingest_relay;
CREATE ROLE regress_ingest_operator;
CREATE ROLE regress_ingest_other;
SELECT inbox_grant_bundle('regress_ingest_relay', 'relay');
SELECT inbox_grant_bundle('regress_ingest_relay', 'receiver');
SELECT inbox_grant_bundle('regress_ingest_operator', 'operator');
SELECT inbox_grant_bundle('regress_ingest_other', 'operator');
SELECT bundle, object FROM inbox_bundles
 WHERE object ~ '(subscri|ingest|source_schemes)' ORDER BY 1, 2;
SET ROLE regress_ingest_relay;
SELECT regress.try($$SELECT inbox_subscribe('orders', 'amqp://rabbit.example/v?queue=q')$$);
SELECT regress.try($$SELECT inbox_unsubscribe('billing', 'amqps://app@rabbit.example/v?queue=billing&cacert=/etc/ca.pem')$$);

-- The relay reads every subscription, and records rejects
SELECT scope, source, options FROM inbox_subscriptions ORDER BY 1, 2;
SELECT count(*) FROM inbox_source_schemes();
SELECT inbox_ingest_reject('billing', 'amqps://app@rabbit.example/v?queue=billing&cacert=/etc/ca.pem',
						   '17', 'IB002: different content under message id "m-1"',
						   '\x7b7d', '{"content_type": "application/json"}');
SELECT inbox_ingest_reject('billing', 'amqps://app@rabbit.example/v?queue=billing&cacert=/etc/ca.pem',
						   '18', 'no message id', '\x00ff', NULL);
SELECT regress.try($$SELECT inbox_ingest_reject('billing', NULL, '1', 'r', NULL, NULL)$$);
SELECT regress.try($$SELECT inbox_ingest_reject('billing', 's', '1', NULL, NULL, NULL)$$);
SELECT regress.try($$SELECT inbox_ingest_reject('billing', 's', '1', 'r', NULL, '[1]')$$);
-- but neither reads nor removes them
SELECT regress.try($$SELECT count(*) FROM inbox_ingest_rejects$$);
RESET ROLE;

-- A reserved scope takes rejects from its grantees only
SELECT inbox_grant('billing', 'regress_ingest_operator');
SET ROLE regress_ingest_relay;
SELECT regress.try($$SELECT inbox_ingest_reject('billing', 's', '19', 'r', NULL, NULL)$$);
RESET ROLE;

-- The operators see the rejects of the scopes they may act on
SET ROLE regress_ingest_operator;
SELECT scope, source, broker_id, reason, payload, headers, rejected_at <= now() AS rejected
  FROM inbox_ingest_rejects ORDER BY broker_id;
SELECT scope, source FROM inbox_subscriptions ORDER BY 1, 2;
RESET ROLE;
SELECT id AS reject_17 FROM inbox.ingest_rejects WHERE broker_id = '17' \gset
SET ROLE regress_ingest_other;
SELECT count(*) FROM inbox_ingest_rejects;
-- and a reject of another's scope is an unknown id to them
SELECT regress.try(format('SELECT inbox_ingest_forget(%L)', :'reject_17')) ~ '^42704: no ingest reject ' AS unknown;
RESET ROLE;
SET ROLE regress_ingest_operator;
SELECT inbox_ingest_forget(id) FROM inbox_ingest_rejects WHERE broker_id = '17';
SELECT regress.try($$SELECT inbox_ingest_forget('00000000-0000-0000-0000-000000000000')$$);
SELECT broker_id, reason FROM inbox_ingest_rejects;
RESET ROLE;

-- Leave nothing behind for the tests that follow
SELECT inbox_revoke('billing', 'regress_ingest_operator');
SELECT count(inbox_unsubscribe(s.scope, s.source)) FROM inbox_subscriptions AS s;
DELETE FROM inbox.ingest_rejects;
SELECT inbox_revoke_bundle('regress_ingest_relay', 'relay');
SELECT inbox_revoke_bundle('regress_ingest_relay', 'receiver');
SELECT inbox_revoke_bundle('regress_ingest_operator', 'operator');
SELECT inbox_revoke_bundle('regress_ingest_other', 'operator');
DROP ROLE regress_ingest_relay, regress_ingest_operator, regress_ingest_other;
