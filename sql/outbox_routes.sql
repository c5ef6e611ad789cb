--
-- outbox_routes: what a route may hold (the schemes the relay serves,
-- each scheme's URL parameters and route options, never a secret however
-- it is written), the notification of route changes, and what
-- outbox_stats says of a route: its last error and its last delivery.
-- outbox_unroute against a send in flight, and the notification of
-- route changes, are the isolation spec outbox_unroute.
--
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- The one list of schemes, parameters and options
SELECT scheme, parameters, options FROM outbox_schemes() WHERE scheme NOT LIKE 'postgres%';
SELECT scheme, cardinality(parameters), parameters[1:2], 'sslmode' = ANY (parameters) AS sslmode,
	   'password' = ANY (parameters) AS password, 'sslpassword' = ANY (parameters) AS sslpassword
  FROM outbox_schemes() WHERE scheme LIKE 'postgres%';

-- Only the schemes the relay serves
SELECT regress.try($$SELECT outbox_route('r', 'file:///etc/passwd')$$);
SELECT regress.try($$SELECT outbox_route('r', 'ftp://files.example/drop')$$);
SELECT regress.try($$SELECT outbox_route('r', 'mailto:ops@example.com')$$);
SELECT regress.try($$SELECT outbox_route('r', 'AMQP://rabbit.example/v')$$);
SELECT regress.try($$SELECT outbox_route('r', 'amqp:rabbit.example')$$);

-- Secrets, however written: in the user information, as a parameter by
-- any name of a secret, in any case, percent-encoded, after other
-- parameters or after a '#'
SELECT regress.try(format('SELECT outbox_route(%L, %L)', 'r', t))
  FROM unnest(ARRAY[
	'amqp://app:s3cret@rabbit.example/v',
	'amqp://app:@rabbit.example/v',
	'https://hook-user@hooks.example/x',
	'postgresql://db.example/app?scope=s&password=x',
	'postgresql://db.example/app?scope=s&%70assword=x',
	'postgresql://db.example/app?scope=s&%50ASSWORD=x',
	'postgresql://db.example/app?scope=s&PassWord=x',
	'postgresql://db.example/app?sslpassword=x&scope=s',
	'postgresql://db.example/app?scope=s&oauth_client_secret=x',
	'postgresql://db.example/app?scope=s#&password=x',
	'postgresql://db.example?scope=app:s3cret@db.example/app',
	'amqp://rabbit.example/v?exchange=e&token=x',
	'amqp://rabbit.example/v?access_token=x',
	'amqp://rabbit.example/v?api_key=x',
	'amqp://rabbit.example/v?API-KEY=x',
	'amqp://rabbit.example/v?Authorization=Bearer%20x',
	'https://hooks.example/x?secret=x',
	'https://hooks.example/x?sig=x']) AS t;

-- Parameters a scheme does not take, named
SELECT regress.try(format('SELECT outbox_route(%L, %L)', 'r', t))
  FROM unnest(ARRAY[
	'amqp://rabbit.example/v?exchange=e&queue=q',
	'amqp://rabbit.example/v?cacert=/etc/ca.pem',
	'amqp://rabbit.example/v?Exchange=e',
	'amqp://rabbit.example/v?%65xchange=e',
	'amqps://rabbit.example/v?verify=false',
	'https://hooks.example/x?channel=orders',
	'http://hooks.example/x?',
	'postgresql://db.example/app?scope=s&replication=database',
	'postgresql://db.example/app?scope=s&SSLMODE=require',
	'postgresql://db.example/app?scope=s&ordered=maybe',
	'postgresql://db.example/app?scope=s&pass%00word=x']) AS t;

-- What each scheme takes
SELECT outbox_route('r', t) FROM unnest(ARRAY[
	'amqp://app@rabbit.example/v?exchange=e&routing_key=k&outbox_headers=true',
	'amqps://app@rabbit.example/v?exchange=e&cacert=/etc/inbox-relay/ca.pem',
	'https://hooks.example/x',
	'http://127.0.0.1:8080/hook',
	'postgresql://relay@db.example/app?scope=s&ordered=off&sslmode=verify-full&connect_timeout=5'
	'&application_name=relay&options=-c%20search_path%3Dx&target_session_attrs=read-write'
	'&passfile=/etc/inbox-relay/pgpass&sslrootcert=/etc/ssl/ca.pem',
	'postgres:///app?host=/run/postgresql&port=5433&user=relay&scope=s&ordered=on']) AS t;

-- Route options: max_attempts, backoff and max_backoff, nothing else;
-- none that names a secret, in any case
SELECT regress.try(format('SELECT outbox_route(%L, %L, %L)', 'r', 'https://hooks.example/x', o))
  FROM unnest(ARRAY['{"Api_Key": "x"}', '{"authorization": "x"}', '{"Password": "x"}',
					'{"retries": 3}', '{"Max_Attempts": 3}', '{"max_attempts": 3, "backoff": "2 s", "max_backoff": "1 min"}']) AS o;

-- outbox_unroute waits for the sends in flight, so its snapshot must be
-- taken after the wait
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT regress.try($$SELECT outbox_unroute('r', 'https://hooks.example/x')$$);
ROLLBACK;

-- outbox_stats: the last error, when it came, and the last delivery
SELECT outbox_route('st', 'https://hooks.example/st', '{"max_attempts": 5}');
SELECT outbox_route('st2', 'https://hooks.example/st');
SELECT outbox_route('st', 'https://other.example/st');
SELECT count(outbox_send('st', 'k' || i, '{}'::jsonb)) FROM generate_series(1, 3) AS i;
SELECT topic, target, sent, last_error, last_error_at, last_delivered_at
  FROM outbox_stats WHERE topic LIKE 'st%' ORDER BY 1, 2;
CREATE TABLE regress.st_receipts AS
	SELECT f.key, f.receipt FROM outbox_fetch('https://hooks.example/st', 10, '1 minute') AS f;
SELECT outbox_fail(receipt, '503 Service Unavailable: busy', '0 seconds') FROM regress.st_receipts WHERE key = 'k1';
SELECT topic, target, sent, last_error, now() - last_error_at < interval '1 minute' AS error_at_now, last_delivered_at
  FROM outbox_stats WHERE topic = 'st' ORDER BY 1, 2;
SELECT outbox_ack(receipt) FROM regress.st_receipts WHERE key = 'k2';
SELECT outbox_ack_many(array_agg(receipt)) FROM regress.st_receipts WHERE key = 'k3';
SELECT topic, target, sent, last_error, now() - last_delivered_at < interval '1 minute' AS delivered_at_now,
	   last_delivered_at >= last_error_at AS after_error
  FROM outbox_stats WHERE topic = 'st' ORDER BY 1, 2;
-- The columns come after those outbox_stats had
SELECT attnum, attname FROM pg_attribute
 WHERE attrelid = 'outbox_stats'::regclass AND attnum > 0 ORDER BY attnum;
-- A target's own error, for each of its routes, and not another's
SELECT outbox_report('https://hooks.example/st', 'cannot connect: connection refused');
SELECT outbox_report('https://nowhere.example/', 'cannot connect');
SELECT topic, target, sent, last_error, last_delivered_at IS NOT NULL AS delivered
  FROM outbox_stats WHERE topic LIKE 'st%' ORDER BY 1, 2;
SELECT regress.try($$SELECT outbox_report('https://hooks.example/st', NULL)$$);
SELECT regress.try($$SELECT outbox_report(NULL, 'x')$$);
-- The route's removal forgets them
SELECT outbox_unroute('st2', 'https://hooks.example/st');
SELECT outbox_route('st2', 'https://hooks.example/st');
SELECT topic, target, sent, last_error, last_delivered_at
  FROM outbox_stats WHERE topic = 'st2' ORDER BY 1, 2;

-- Privileges: outbox_schemes for the operator and relay bundles,
-- outbox_report for the relay's
SELECT bundle, object FROM inbox_bundles
 WHERE object IN ('outbox_schemes()', 'outbox_report(text,text)') ORDER BY 1, 2;
CREATE ROLE regress_routes_nobody;
SET ROLE regress_routes_nobody;
SELECT regress.try($$SELECT outbox_report('https://hooks.example/st', 'x')$$);
SELECT regress.try($$SELECT count(*) FROM outbox_schemes()$$);
RESET ROLE;
CREATE ROLE regress_routes_relay;
SELECT inbox_grant_bundle('regress_routes_relay', 'relay');
SET ROLE regress_routes_relay;
SELECT outbox_report('https://other.example/st', 'scheme not served by this relay');
SELECT count(*) FROM outbox_schemes();
RESET ROLE;
SELECT topic, target, last_error FROM outbox_stats WHERE target = 'https://other.example/st';
SELECT inbox_revoke_bundle('regress_routes_relay', 'relay');
DROP ROLE regress_routes_nobody, regress_routes_relay;

-- Leave nothing behind for the tests that follow
SELECT count(outbox_unroute(r.topic, r.target)) FROM outbox_routes AS r
 WHERE r.topic IN ('r', 'st', 'st2');
DROP TABLE regress.st_receipts;
