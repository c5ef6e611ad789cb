/*
 * inbox--1.1.0--1.2.0.sql: update from 1.1.0 to 1.2.0, literal.
 *
 * 1.2.0 adds ingest (section 12 of sql/inbox.sql): inbox_subscribe and
 * inbox_unsubscribe, the view inbox_subscriptions, inbox_source_schemes,
 * and the rejects: inbox_ingest_reject, the view inbox_ingest_rejects and
 * inbox_ingest_forget.  outbox_schemes() lists the Kafka and NATS
 * JetStream targets.  A received message keeps its headers: the
 * receives take them last, the takes return them last, which changes the
 * receives' identities.  A send copies the caller's trace context
 * (inbox.traceparent, inbox.tracestate) into its message's headers.  The
 * library serves the SQL of 1.0.0, 1.1.0 and 1.2.0 through the same entry
 * points.
 */

-- complain if the script is sourced in psql rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION inbox UPDATE TO '1.2.0'" to load this file. \quit

/* ------------------------------------------------------------------------
 * Ingest
 */
/*
 * Subscriptions: a broker's queue (a source) whose messages the relay
 * writes into a scope with inbox_receive_many, acknowledging them to the
 * broker only after that transaction has committed.  The extension's
 * owner subscribes and unsubscribes; the relay reads the view
 * inbox_subscriptions, and re-reads it when a change commits (the
 * notification inbox_subscriptions, whose payload is the scope and the
 * source, separated by a space).
 *
 * A source is a URL of a scheme the relay reads, whose query holds only
 * the parameters that scheme reads, and whose options are only those the
 * relay reads: inbox_source_schemes() is the one list of them.  Secrets
 * live in the relay's secrets file, as the targets' do: a password in
 * the URL's user information, and a parameter or option whose name,
 * percent-decoded and in any case, names a secret, are refused as such.
 *
 * What the relay cannot write, because the database refuses the message
 * on its own account (a class 22 error after max_attempts, a message
 * without a usable id, different content under an id already received),
 * is recorded with inbox_ingest_reject and only then acknowledged.  The
 * rejects stay until an operator removes them with inbox_ingest_forget:
 * each is a message the broker no longer holds.
 */
CREATE TABLE inbox.subscriptions (
	scope text COLLATE pg_catalog."C" NOT NULL,
	source text COLLATE pg_catalog."C" NOT NULL,
	options jsonb NOT NULL DEFAULT '{}',
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT subscriptions_pkey PRIMARY KEY (scope, source)
);

COMMENT ON TABLE inbox.subscriptions IS
'the sources (broker queues) the relay writes into each scope, with their options';

REVOKE ALL ON TABLE inbox.subscriptions FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.subscriptions', '');

CREATE TABLE inbox.ingest_rejects (
	id uuid NOT NULL DEFAULT inbox.uuid_v7(),
	scope text COLLATE pg_catalog."C" NOT NULL,
	source text COLLATE pg_catalog."C" NOT NULL,
	broker_id text COLLATE pg_catalog."C",
	reason text NOT NULL,
	payload bytea,
	headers jsonb,
	rejected_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	CONSTRAINT ingest_rejects_pkey PRIMARY KEY (id)
);

COMMENT ON TABLE inbox.ingest_rejects IS
'messages a source delivered that the relay could not write into the scope, recorded before their acknowledgement';

CREATE INDEX ingest_rejects_scope_rejected_at ON inbox.ingest_rejects (scope, rejected_at);

REVOKE ALL ON TABLE inbox.ingest_rejects FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('inbox.ingest_rejects', '');

CREATE FUNCTION @extschema@.inbox_source_schemes()
RETURNS TABLE (scheme text, parameters text[], required text[], options text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.scheme, s.parameters, s.required,
		   ARRAY['max_attempts', 'message_id_header', 'group_key', 'batch']
	  FROM (VALUES
		('amqp', ARRAY['queue'], ARRAY['queue']),
		('amqps', ARRAY['queue', 'cacert'], ARRAY['queue']),
		-- A consumer group's offsets, committed after the database's
		('kafka', ARRAY['group', 'security_protocol', 'sasl_mechanism', 'sasl_username', 'cacert'],
		 ARRAY['group']),
		-- A JetStream stream's durable pull consumer
		('nats', ARRAY['consumer', 'cacert'], ARRAY['consumer'])) AS s(scheme, parameters, required)
$$;

COMMENT ON FUNCTION @extschema@.inbox_source_schemes() IS
'the source schemes the relay reads, with the URL parameters each accepts and requires, and the subscription options';

-- The source URL's checks that do not depend on its scheme
CREATE FUNCTION inbox.ingest_check_source(source_url text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF source_url IS NULL THEN
		RAISE EXCEPTION 'source_url must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF source_url !~ '^[A-Za-z][A-Za-z0-9+.-]*://' THEN
		RAISE EXCEPTION 'source_url must be a URL'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(source_url)),
				  HINT = 'For example amqp://host/vhost?queue=orders.';
	END IF;
	IF source_url ~ '[[:cntrl:][:space:]]' OR pg_catalog.octet_length(source_url) OPERATOR(pg_catalog.>) 2048 THEN
		RAISE EXCEPTION 'source_url must be at most 2048 bytes, without spaces or control characters'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(source_url));
	END IF;
END
$$;

CREATE FUNCTION inbox.inbox_subscribe(scope text, source_url text, options jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_scope text := inbox_subscribe.scope;
	p_source text := inbox_subscribe.source_url;
	opts jsonb := coalesce(inbox_subscribe.options, '{}');
	p_scheme text;
	parameters text[];
	required text[];
	allowed text[];
	seen text[] := '{}';
	userinfo text;
	pair text;
	raw text;
	name text;
	k text;
	gk text;
BEGIN
	PERFORM inbox.check_key(p_scope, NULL, false);
	PERFORM inbox.ingest_check_source(p_source);
	p_scheme := pg_catalog.substring(p_source, '^([^:]*)://');
	SELECT s.parameters, s.required, s.options INTO parameters, required, allowed
	  FROM @extschema@.inbox_source_schemes() AS s WHERE s.scheme OPERATOR(pg_catalog.=) p_scheme;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'source_url''s scheme is not one the relay reads'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is "%s".', inbox.quote(p_scheme)),
				  HINT = 'The schemes are ' OPERATOR(pg_catalog.||)
						 (SELECT pg_catalog.string_agg(s.scheme OPERATOR(pg_catalog.||) '://', ', ')
							FROM @extschema@.inbox_source_schemes() AS s) OPERATOR(pg_catalog.||)
						 ': inbox_source_schemes() lists them.';
	END IF;
	-- The user information, the widest reading: up to the first '@'
	-- before the first '/'
	userinfo := pg_catalog.substring(pg_catalog.substring(p_source, '^[^:]*://([^/]*)'), '^([^@]*)@');
	IF pg_catalog.strpos(coalesce(userinfo, ''), ':') OPERATOR(pg_catalog.>) 0 THEN
		RAISE EXCEPTION 'source_url must not hold a password'
			USING ERRCODE = '22023',
				  DETAIL = 'The subscriptions are readable by operators, and their rows reach dumps and logs.',
				  HINT = 'Give the source without its password, and put the password in the relay''s secrets file.';
	END IF;
	FOR pair IN SELECT p FROM pg_catalog.regexp_split_to_table(
					 coalesce(pg_catalog.substring(p_source, '\?(.*)$'), ''), '&') AS p
				 WHERE p OPERATOR(pg_catalog.<>) '' LOOP
		raw := pg_catalog.split_part(pair, '=', 1);
		name := inbox.outbox_url_decode(raw);
		IF inbox.outbox_secret_name(name) THEN
			RAISE EXCEPTION 'source_url must not hold a secret'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('URL parameter "%s" names one; the subscriptions are readable '
												 'by operators, and their rows reach dumps and logs.', inbox.quote(raw)),
					  HINT = 'Put secrets in the relay''s secrets file.';
		END IF;
		IF NOT raw OPERATOR(pg_catalog.=) ANY (parameters) THEN
			RAISE EXCEPTION 'URL parameter "%" is not one that %:// sources take', inbox.quote(raw), p_scheme
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They take %s.', pg_catalog.array_to_string(parameters, ', ')),
					  HINT = 'inbox_source_schemes() lists the parameters of each scheme.';
		END IF;
		IF raw OPERATOR(pg_catalog.=) ANY (seen) THEN
			RAISE EXCEPTION 'URL parameter "%" is given twice', inbox.quote(raw)
				USING ERRCODE = '22023';
		END IF;
		seen := seen OPERATOR(pg_catalog.||) raw;
		IF coalesce(inbox.outbox_url_decode(pg_catalog.substr(pair, pg_catalog.length(raw) OPERATOR(pg_catalog.+) 2)), '')
		   OPERATOR(pg_catalog.=) '' THEN
			RAISE EXCEPTION 'URL parameter "%" must not be empty', inbox.quote(raw)
				USING ERRCODE = '22023';
		END IF;
	END LOOP;
	FOREACH k IN ARRAY required LOOP
		IF NOT k OPERATOR(pg_catalog.=) ANY (seen) THEN
			RAISE EXCEPTION 'source_url must name its %', k
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('%s:// sources require URL parameter "%s".', p_scheme, k),
					  HINT = 'For example amqp://host/vhost?queue=orders.';
		END IF;
	END LOOP;
	IF pg_catalog.jsonb_typeof(opts) OPERATOR(pg_catalog.<>) 'object' THEN
		RAISE EXCEPTION 'options must be a JSON object'
			USING ERRCODE = '22023';
	END IF;
	FOR k IN SELECT pg_catalog.jsonb_object_keys(opts) LOOP
		IF inbox.outbox_secret_name(k) THEN
			RAISE EXCEPTION 'options must not hold a secret'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('Option "%s" names one.', inbox.quote(k)),
					  HINT = 'Put secrets in the relay''s secrets file.';
		END IF;
		IF NOT k OPERATOR(pg_catalog.=) ANY (allowed) THEN
			RAISE EXCEPTION 'option "%" is not one that subscriptions to %:// take', inbox.quote(k), p_scheme
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They take %s.', pg_catalog.array_to_string(allowed, ', ')),
					  HINT = 'inbox_source_schemes() lists the options of each scheme.';
		END IF;
	END LOOP;
	-- Each option of one JSON type, so that the relay reads it one way
	IF (opts OPERATOR(pg_catalog.?) 'max_attempts'
		AND (pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'max_attempts') OPERATOR(pg_catalog.<>) 'number'
			 OR (opts OPERATOR(pg_catalog.->>) 'max_attempts') !~ '^[0-9]{1,9}$'
			 OR (opts OPERATOR(pg_catalog.->>) 'max_attempts')::integer OPERATOR(pg_catalog.<) 1))
	   OR (opts OPERATOR(pg_catalog.?) 'batch'
		   AND (pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'batch') OPERATOR(pg_catalog.<>) 'number'
				OR (opts OPERATOR(pg_catalog.->>) 'batch') !~ '^[0-9]{1,4}$'
				OR (opts OPERATOR(pg_catalog.->>) 'batch')::integer NOT BETWEEN 1 AND 1000))
	   OR (opts OPERATOR(pg_catalog.?) 'message_id_header'
		   AND (pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'message_id_header') OPERATOR(pg_catalog.<>) 'string'
				OR (opts OPERATOR(pg_catalog.->>) 'message_id_header') !~ '^[!#$%&''*+.^_`|~0-9A-Za-z-]{1,255}$'))
	THEN
		RAISE EXCEPTION 'invalid subscription options'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('They are %s.', opts),
				  HINT = 'max_attempts is an integer of at least 1, batch an integer from 1 to 1000, '
						 'message_id_header a header name.';
	END IF;
	IF opts OPERATOR(pg_catalog.?) 'group_key' THEN
		gk := CASE WHEN pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'group_key') OPERATOR(pg_catalog.=) 'string'
				   THEN opts OPERATOR(pg_catalog.->>) 'group_key' END;
		IF gk IS NULL OR NOT (gk OPERATOR(pg_catalog.=) 'routing_key'
							  OR gk ~ '^header:[!#$%&''*+.^_`|~0-9A-Za-z-]{1,255}$') THEN
			RAISE EXCEPTION 'invalid subscription options'
				USING ERRCODE = '22023',
					  DETAIL = pg_catalog.format('They are %s.', opts),
					  HINT = 'group_key is "routing_key" or "header:NAME".';
		END IF;
	END IF;
	INSERT INTO inbox.subscriptions AS s (scope, source, options)
	VALUES (p_scope, p_source, opts)
	ON CONFLICT ON CONSTRAINT subscriptions_pkey DO UPDATE SET options = EXCLUDED.options;
	-- The relays re-read their subscriptions when this commits
	PERFORM pg_catalog.pg_notify('inbox_subscriptions', p_scope OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) p_source);
END
$$;

CREATE FUNCTION inbox.inbox_unsubscribe(scope text, source_url text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_scope text := inbox_unsubscribe.scope;
	p_source text := inbox_unsubscribe.source_url;
BEGIN
	PERFORM inbox.check_key(p_scope, NULL, false);
	IF p_source IS NULL THEN
		RAISE EXCEPTION 'source_url must not be null'
			USING ERRCODE = '22004';
	END IF;
	DELETE FROM inbox.subscriptions AS s
	 WHERE s.scope OPERATOR(pg_catalog.=) p_scope COLLATE "C"
	   AND s.source OPERATOR(pg_catalog.=) p_source COLLATE "C";
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no subscription of scope "%" to source "%"',
			inbox.quote(p_scope), inbox.quote(p_source)
			USING ERRCODE = '42704',
				  HINT = 'The view inbox_subscriptions lists the subscriptions.';
	END IF;
	PERFORM pg_catalog.pg_notify('inbox_subscriptions', p_scope OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) p_source);
END
$$;

/*
 * A message the relay could not write into the scope, recorded before the
 * relay acknowledges it to the broker: the source, the broker's id of the
 * message (an AMQP delivery tag, an offset, a sequence), the reason, and
 * the payload and headers as the broker delivered them.  A relay that
 * dies between this commit and the acknowledgement receives the message
 * again, and may record it twice: never none.
 */
CREATE FUNCTION inbox.inbox_ingest_reject(scope text, source text, broker_id text, reason text,
										  payload bytea, headers jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM inbox.check_key(inbox_ingest_reject.scope, NULL, false);
	IF inbox_ingest_reject.source IS NULL OR inbox_ingest_reject.reason IS NULL THEN
		RAISE EXCEPTION 'source and reason must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF inbox_ingest_reject.headers IS NOT NULL
	   AND pg_catalog.jsonb_typeof(inbox_ingest_reject.headers) OPERATOR(pg_catalog.<>) 'object' THEN
		RAISE EXCEPTION 'headers must be a JSON object'
			USING ERRCODE = '22023';
	END IF;
	INSERT INTO inbox.ingest_rejects (scope, source, broker_id, reason, payload, headers)
	VALUES (inbox_ingest_reject.scope, inbox_ingest_reject.source, inbox_ingest_reject.broker_id,
			inbox_ingest_reject.reason, inbox_ingest_reject.payload, inbox_ingest_reject.headers);
END
$$;

/*
 * Remove a reject once it has been dealt with.  A reject of a scope the
 * caller may not act on is answered as an unknown id, which names no
 * scope.
 */
CREATE FUNCTION inbox.inbox_ingest_forget(id uuid)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_scope text;
BEGIN
	SELECT r.scope INTO p_scope FROM inbox.ingest_rejects AS r
	 WHERE r.id OPERATOR(pg_catalog.=) inbox_ingest_forget.id;
	IF NOT FOUND OR NOT inbox.caller_sees(p_scope) THEN
		RAISE EXCEPTION 'no ingest reject %', coalesce(inbox_ingest_forget.id::text, 'NULL')
			USING ERRCODE = '42704',
				  HINT = 'The view inbox_ingest_rejects lists the rejects.';
	END IF;
	DELETE FROM inbox.ingest_rejects AS r WHERE r.id OPERATOR(pg_catalog.=) inbox_ingest_forget.id;
END
$$;

COMMENT ON FUNCTION inbox.inbox_subscribe(text, text, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_unsubscribe(text, text) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_ingest_reject(text, text, text, text, bytea, jsonb) IS
'implementation behind the API function of the same name; call that one';
COMMENT ON FUNCTION inbox.inbox_ingest_forget(uuid) IS
'implementation behind the API function of the same name; call that one';

-- The entry points

CREATE FUNCTION @extschema@.inbox_subscribe(scope text, source_url text, options jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_subscribe(text, text, jsonb) IS
'write a source''s messages (a broker queue, a URL without secrets) into a scope, or change the subscription''s options';

CREATE FUNCTION @extschema@.inbox_unsubscribe(scope text, source_url text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_admin'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_unsubscribe(text, text) IS
'stop writing a source''s messages into a scope';

CREATE FUNCTION @extschema@.inbox_ingest_reject(scope text, source text, broker_id text, reason text,
												payload bytea, headers jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_ingest_reject(text, text, text, text, bytea, jsonb) IS
'record a message of a source that cannot be written into the scope, before acknowledging it to the broker';

CREATE FUNCTION @extschema@.inbox_ingest_forget(id uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_enter_rows'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.inbox_ingest_forget(uuid) IS
'remove an ingest reject that has been dealt with';

-- The views, read as the extension's owner through these functions.
-- inbox_subscriptions lists every subscription: a relay serves each one,
-- and one whose scope it may not write into fails loudly, with 42501,
-- rather than being skipped.  inbox_ingest_rejects shows the scopes the
-- role querying may act on (inbox.scope_visible).
CREATE FUNCTION inbox.subscription_rows()
RETURNS TABLE (scope text, source text, options jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.scope, s.source, s.options, s.created_at FROM inbox.subscriptions AS s
$$;

CREATE FUNCTION inbox.ingest_reject_rows()
RETURNS TABLE (scope text, source text, broker_id text, reason text, payload bytea,
			   headers jsonb, rejected_at timestamptz, id uuid)
LANGUAGE sql STABLE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT r.scope, r.source, r.broker_id, r.reason, r.payload, r.headers, r.rejected_at, r.id
	  FROM inbox.ingest_rejects AS r
$$;

CREATE VIEW @extschema@.inbox_subscriptions AS
	SELECT s.scope COLLATE "C" AS scope, s.source COLLATE "C" AS source, s.options, s.created_at
	  FROM inbox.subscription_rows() AS s;

COMMENT ON VIEW @extschema@.inbox_subscriptions IS
'the subscriptions: which source (broker queue) the relay writes into each scope, with its options';

CREATE VIEW @extschema@.inbox_ingest_rejects WITH (security_barrier) AS
	SELECT r.scope COLLATE "C" AS scope, r.source COLLATE "C" AS source, r.broker_id COLLATE "C" AS broker_id,
		   r.reason, r.payload, r.headers, r.rejected_at, r.id
	  FROM inbox.ingest_reject_rows() AS r
	 WHERE inbox.scope_visible(r.scope);

COMMENT ON VIEW @extschema@.inbox_ingest_rejects IS
'messages of a source that could not be written into their scope, recorded before they were acknowledged; inbox_ingest_forget removes one';

REVOKE ALL ON FUNCTION inbox.ingest_check_source(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_subscribe(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_unsubscribe(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_ingest_reject(text, text, text, text, bytea, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox.inbox_ingest_forget(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_source_schemes() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_subscribe(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_unsubscribe(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_ingest_reject(text, text, text, text, bytea, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.inbox_ingest_forget(uuid) FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_subscriptions FROM PUBLIC;
REVOKE ALL ON TABLE @extschema@.inbox_ingest_rejects FROM PUBLIC;

-- The relay reads the subscriptions and records rejects; the operator
-- reads both and removes rejects
SELECT inbox.bundle_add('relay', 'function', '@extschema@.inbox_source_schemes()');
SELECT inbox.bundle_add('relay', 'view', '@extschema@.inbox_subscriptions');
SELECT inbox.bundle_add('relay', 'function',
						'@extschema@.inbox_ingest_reject(text, text, text, text, bytea, jsonb)');
SELECT inbox.bundle_add('operator', 'function', '@extschema@.inbox_source_schemes()');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_subscriptions');
SELECT inbox.bundle_add('operator', 'view', '@extschema@.inbox_ingest_rejects');
SELECT inbox.bundle_add('operator', 'function', '@extschema@.inbox_ingest_forget(uuid)');

/* ------------------------------------------------------------------------
 * Outbox: the targets' schemes
 */
CREATE OR REPLACE FUNCTION @extschema@.outbox_schemes()
RETURNS TABLE (scheme text, parameters text[], options text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT s.scheme, s.parameters, ARRAY['max_attempts', 'backoff', 'max_backoff']
	  FROM (VALUES
		('amqp', ARRAY['exchange', 'routing_key', 'outbox_headers']),
		('amqps', ARRAY['exchange', 'routing_key', 'outbox_headers', 'cacert']),
		-- A webhook's query string goes to the endpoint as it is, and is
		-- where endpoints take their credentials: none is accepted
		('http', ARRAY[]::text[]),
		('https', ARRAY[]::text[]),
		-- The topic is the URL's path, or the outbox topic without one
		('kafka', ARRAY['security_protocol', 'sasl_mechanism', 'sasl_username', 'cacert']),
		-- A JetStream subject, the URL's path
		('nats', ARRAY['cacert']),
		('postgresql', NULL),
		('postgres', NULL)) AS s0(scheme, parameters)
	 CROSS JOIN LATERAL (SELECT s0.scheme, coalesce(s0.parameters, ARRAY[
		-- The receiving inbox's scope and ordered, then libpq's own
		-- parameters, but for its secrets (password, sslpassword,
		-- oauth_client_secret) and those a relay has no use for
		-- (replication, the interactive OAuth flow)
		'scope', 'ordered',
		'host', 'hostaddr', 'port', 'dbname', 'user', 'passfile', 'require_auth',
		'channel_binding', 'connect_timeout', 'client_encoding', 'options',
		'application_name', 'fallback_application_name', 'keepalives', 'keepalives_idle',
		'keepalives_interval', 'keepalives_count', 'tcp_user_timeout', 'sslmode',
		'sslnegotiation', 'sslcompression', 'sslcert', 'sslkey', 'sslcertmode', 'sslrootcert',
		'sslcrl', 'sslcrldir', 'sslsni', 'requirepeer', 'ssl_min_protocol_version',
		'ssl_max_protocol_version', 'min_protocol_version', 'max_protocol_version',
		'gssencmode', 'krbsrvname', 'gsslib', 'gssdelegation', 'service',
		'target_session_attrs', 'load_balance_hosts'])) AS s(scheme, parameters)
$$;

COMMENT ON FUNCTION @extschema@.outbox_schemes() IS
'the target schemes the relay serves, with the URL parameters and the route options each accepts';

/* ------------------------------------------------------------------------
 * Headers in the inbox
 *
 * A received message keeps its headers (inbox.entries.headers, last, NULL
 * for none: adding it rewrites nothing), the receives take them last, and
 * the takes return them last.  The functions whose arguments or result
 * change are dropped and made again; the API ones keep their bundle and
 * the EXECUTE privileges granted on them (inbox.replace_api, as 1.1.0's
 * script did).
 */
ALTER TABLE inbox.entries ADD COLUMN headers jsonb;

DROP FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer);
CREATE FUNCTION inbox.inbox_receive(scope text, message_id text, payload jsonb,
									payload_hash bytea DEFAULT NULL,
									not_before timestamptz DEFAULT NULL,
									group_key text DEFAULT NULL,
									priority integer DEFAULT 0,
									headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_json_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) FROM PUBLIC;

DROP FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer);
CREATE FUNCTION inbox.inbox_receive(scope text, message_id text, payload bytea,
									payload_hash bytea DEFAULT NULL,
									not_before timestamptz DEFAULT NULL,
									group_key text DEFAULT NULL,
									priority integer DEFAULT 0,
									headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_receive_bytes_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) FROM PUBLIC;

DROP FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[]);
CREATE FUNCTION inbox.inbox_receive_many(scope text, message_ids text[], payloads jsonb[],
										 payload_hashes bytea[] DEFAULT NULL,
										 not_before timestamptz DEFAULT NULL,
										 on_mismatch text DEFAULT 'raise',
										 group_keys text[] DEFAULT NULL,
										 priorities integer[] DEFAULT NULL,
										 headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_receive_many_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) FROM PUBLIC;

DROP FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[]);
CREATE FUNCTION inbox.inbox_receive_many(scope text, message_ids text[], payloads bytea[],
										 payload_hashes bytea[] DEFAULT NULL,
										 not_before timestamptz DEFAULT NULL,
										 on_mismatch text DEFAULT 'raise',
										 group_keys text[] DEFAULT NULL,
										 priorities integer[] DEFAULT NULL,
										 headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_receive_many_bytes'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) FROM PUBLIC;

DROP FUNCTION inbox.inbox_take(text, integer, interval);
CREATE FUNCTION inbox.inbox_take(scope text, max_messages integer DEFAULT 1,
								 lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_take_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off;

COMMENT ON FUNCTION inbox.inbox_take(text, integer, interval) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_take(text, integer, interval) FROM PUBLIC;

DROP FUNCTION inbox.inbox_poll(text, integer, interval, interval);
CREATE FUNCTION inbox.inbox_poll(scope text, max_messages integer DEFAULT 1,
								 lease interval DEFAULT '30 seconds',
								 wait interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz,
			   receipt uuid, lease_until timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_poll_1_0'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off;

COMMENT ON FUNCTION inbox.inbox_poll(text, integer, interval, interval) IS
'implementation behind the API function of the same name; call that one';
REVOKE ALL ON FUNCTION inbox.inbox_poll(text, integer, interval, interval) FROM PUBLIC;

/*
 * inbox.replace_api(new, old, create): drop the API functions old (new's
 * own signature when it only changes its result) and run create, which
 * makes new; new goes into their bundle and is granted to every role
 * that was granted EXECUTE on any of them.  Its initial privileges stay
 * as this script sets them (no PUBLIC), so that pg_dump dumps those
 * grants, as inbox.bundle_add does.
 */
CREATE FUNCTION inbox.replace_api(p_new text, p_old text[], p_create text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	grants text[];
	bundle text;
	init pg_catalog.pg_init_privs;
	g text;
	old text;
BEGIN
	SELECT pg_catalog.array_agg(DISTINCT
			   CASE WHEN x.grantee = 0 THEN 'PUBLIC'
					ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(x.grantee)) END
			   || CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
	  INTO grants
	  FROM pg_catalog.unnest(p_old) AS o(f)
	  JOIN pg_catalog.pg_proc AS p ON p.oid = o.f::regprocedure
	 CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS x
	 WHERE x.privilege_type = 'EXECUTE' AND x.grantee <> p.proowner;
	SELECT pg_catalog.min(b.bundle) INTO STRICT bundle FROM inbox.bundle_objects AS b
	 WHERE b.object_type = 'function' AND b.object = ANY (p_old);
	DELETE FROM inbox.bundle_objects AS b
	 WHERE b.object_type = 'function' AND b.object = ANY (p_old);
	FOREACH old IN ARRAY p_old
	LOOP
		EXECUTE pg_catalog.format('DROP FUNCTION %s', old);
	END LOOP;
	EXECUTE p_create;
	EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', p_new);
	SELECT i.* INTO init FROM pg_catalog.pg_init_privs AS i
	 WHERE (i.objoid, i.classoid, i.objsubid) = (p_new::regprocedure, 'pg_catalog.pg_proc'::regclass, 0);
	FOREACH g IN ARRAY coalesce(grants, '{}')
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', p_new, g);
	END LOOP;
	DELETE FROM pg_catalog.pg_init_privs AS i
	 WHERE (i.objoid, i.classoid, i.objsubid) = (p_new::regprocedure, 'pg_catalog.pg_proc'::regclass, 0);
	IF init.objoid IS NOT NULL THEN
		INSERT INTO pg_catalog.pg_init_privs VALUES (init.*);
	END IF;
	INSERT INTO inbox.bundle_objects (bundle, object_type, object) VALUES (bundle, 'function', p_new);
END
$$;

SELECT inbox.replace_api('@extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb)',
						 ARRAY['@extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer)'],
$create$
CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload jsonb,
										  payload_hash bytea DEFAULT NULL,
										  not_before timestamptz DEFAULT NULL,
										  group_key text DEFAULT NULL,
										  priority integer DEFAULT 0,
										  headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, jsonb, bytea, timestamptz, text, integer, jsonb) IS
'store a message as pending, not to be taken before not_before, behind the earlier messages of its group, ahead of lower priorities: true if new, false (or IB001) if the key exists in any state, IB002 on a payload mismatch';

SELECT inbox.replace_api('@extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb)',
						 ARRAY['@extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer)'],
$create$
CREATE FUNCTION @extschema@.inbox_receive(scope text, message_id text, payload bytea,
										  payload_hash bytea DEFAULT NULL,
										  not_before timestamptz DEFAULT NULL,
										  group_key text DEFAULT NULL,
										  priority integer DEFAULT 0,
										  headers jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive(text, text, bytea, bytea, timestamptz, text, integer, jsonb) IS
'store a binary message (EDI, protobuf, ...) as pending, as the jsonb form does';

SELECT inbox.replace_api('@extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[])',
						 ARRAY['@extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[])'],
$create$
CREATE FUNCTION @extschema@.inbox_receive_many(scope text, message_ids text[], payloads jsonb[],
											   payload_hashes bytea[] DEFAULT NULL,
											   not_before timestamptz DEFAULT NULL,
											   on_mismatch text DEFAULT 'raise',
											   group_keys text[] DEFAULT NULL,
											   priorities integer[] DEFAULT NULL,
											   headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive_many(text, text[], jsonb[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'store a batch of messages as pending: one row per id, received, duplicate or (on_mismatch => ''return'') mismatch';

SELECT inbox.replace_api('@extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[])',
						 ARRAY['@extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[])'],
$create$
CREATE FUNCTION @extschema@.inbox_receive_many(scope text, message_ids text[], payloads bytea[],
											   payload_hashes bytea[] DEFAULT NULL,
											   not_before timestamptz DEFAULT NULL,
											   on_mismatch text DEFAULT 'raise',
											   group_keys text[] DEFAULT NULL,
											   priorities integer[] DEFAULT NULL,
											   headers jsonb[] DEFAULT NULL)
RETURNS TABLE (ordinality integer, message_id text, status text)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_receive_many(text, text[], bytea[], bytea[], timestamptz, text, text[], integer[], jsonb[]) IS
'store a batch of binary messages as pending: one row per id';

SELECT inbox.replace_api('@extschema@.inbox_take(text, integer, interval)',
						 ARRAY['@extschema@.inbox_take(text, integer, interval)'],
$create$
CREATE FUNCTION @extschema@.inbox_take(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_take(text, integer, interval) IS
'take up to max_messages pending messages, oldest first; concurrent takers never get the same one';

SELECT inbox.replace_api('@extschema@.inbox_poll(text, integer, interval, interval)',
						 ARRAY['@extschema@.inbox_poll(text, integer, interval, interval)'],
$create$
CREATE FUNCTION @extschema@.inbox_poll(scope text, max_messages integer DEFAULT 1,
									   lease interval DEFAULT '30 seconds',
									   wait interval DEFAULT NULL)
RETURNS TABLE (message_id text, payload jsonb, payload_bytes bytea,
			   attempts integer, received_at timestamptz,
			   receipt uuid, lease_until timestamptz, group_key text,
			   headers jsonb)
AS 'MODULE_PATHNAME', 'inbox_enter_scope'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
$create$);
COMMENT ON FUNCTION @extschema@.inbox_poll(text, integer, interval, interval) IS
'take up to max_messages messages under a lease, each with a receipt any session may complete; waits up to wait for one to arrive';

DROP FUNCTION inbox.replace_api(text, text[], text);

/* ------------------------------------------------------------------------
 * Trace context: a send copies inbox.traceparent and inbox.tracestate into
 * its message's headers (src/outbox_check.c)
 */
-- A send's headers with the caller's trace context (src/outbox_check.c):
-- inbox.traceparent and inbox.tracestate, unless the headers name a
-- traceparent of their own
CREATE FUNCTION inbox.outbox_trace_headers(headers jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'inbox_outbox_trace_headers'
LANGUAGE C STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION inbox.outbox_trace_headers(jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION inbox.outbox_send_many(topic text, keys text[], payloads jsonb[],
									   headers jsonb DEFAULT NULL)
RETURNS uuid[]
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	p_topic text := outbox_send_many.topic;
	-- Keys are grouped byte by byte, whatever the caller's collation, as
	-- they are stored
	p_keys text[] COLLATE "C" := outbox_send_many.keys;
	p_payloads jsonb[] := outbox_send_many.payloads;
	p_headers jsonb := outbox_send_many.headers;
	n integer := coalesce(pg_catalog.cardinality(p_keys), 0);
	ids uuid[];
	counts jsonb;
BEGIN
	IF p_keys IS NULL OR p_payloads IS NULL THEN
		RAISE EXCEPTION 'keys and payloads must not be null'
			USING ERRCODE = '22004',
				  HINT = 'Pass two arrays of the same length, empty ones to send nothing.';
	END IF;
	-- unnest would flatten a matrix into a list
	IF pg_catalog.array_ndims(p_keys) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'keys must be a one-dimensional array' USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.array_ndims(p_payloads) OPERATOR(pg_catalog.>) 1 THEN
		RAISE EXCEPTION 'payloads must be a one-dimensional array' USING ERRCODE = '22023';
	END IF;
	IF n OPERATOR(pg_catalog.<>) pg_catalog.cardinality(p_payloads) THEN
		RAISE EXCEPTION 'keys and payloads must have the same length'
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('There are %s keys and %s payloads.', n,
											 pg_catalog.cardinality(p_payloads));
	END IF;
	IF n OPERATOR(pg_catalog.>) (SELECT l.batch FROM inbox.outbox_limits() AS l) THEN
		RAISE EXCEPTION 'too many messages in one outbox_send_many'
			USING ERRCODE = '54000',
				  DETAIL = pg_catalog.format('There are %s; the limit is %s.', n,
											 (SELECT l.batch FROM inbox.outbox_limits() AS l)),
				  HINT = 'Send them in several calls, in one transaction if they must commit together.';
	END IF;
	IF n OPERATOR(pg_catalog.=) 0 THEN
		RETURN '{}';
	END IF;
	PERFORM inbox.outbox_check(p_topic, u.k, pg_catalog.pg_column_size(u.p))
	   FROM ROWS FROM (pg_catalog.unnest(p_keys), pg_catalog.unnest(p_payloads)) AS u(k, p);
	PERFORM inbox.outbox_check_headers(p_headers);
	p_headers := inbox.outbox_trace_headers(p_headers);
	ids := ARRAY(SELECT inbox.uuid_v7() FROM pg_catalog.generate_series(1, n));
	-- c, the messages of each key: a key with a row takes last + 1 ..
	-- last + c; one without, r .. r + c - 1, r the clock's reading, read
	-- for each key as its row is inserted, after the waits for the keys
	-- before it (see the banner)
	counts := (SELECT pg_catalog.jsonb_object_agg(g.k, g.c)
				 FROM (SELECT v.k, pg_catalog.count(*) AS c FROM pg_catalog.unnest(p_keys) AS v(k)
						GROUP BY v.k) AS g);

	WITH items AS (
		SELECT u.i, u.k, u.p, ids[u.i] AS id,
			   pg_catalog.row_number() OVER (PARTITION BY u.k ORDER BY u.i) AS r,
			   (counts OPERATOR(pg_catalog.->>) u.k)::bigint AS c
		  FROM ROWS FROM (pg_catalog.unnest(p_keys), pg_catalog.unnest(p_payloads))
			   WITH ORDINALITY AS u(k, p, i)),
	locked AS (
		INSERT INTO inbox.outbox_keys AS k (topic, key, last)
		SELECT p_topic, g.k,
			   inbox.outbox_position_at(pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.+) g.c
			   OPERATOR(pg_catalog.-) 1
		  FROM (SELECT DISTINCT it.k COLLATE "C" AS k, it.c FROM items AS it
				 ORDER BY 1) AS g
		ON CONFLICT ON CONSTRAINT outbox_keys_pkey DO UPDATE
		   SET last = k.last OPERATOR(pg_catalog.+) (counts OPERATOR(pg_catalog.->>) EXCLUDED.key)::bigint
		RETURNING k.key, k.last),
	messages AS (
		INSERT INTO inbox.outbox_messages AS m (id, topic, key, position, payload, headers)
		SELECT it.id, p_topic, it.k, l.last OPERATOR(pg_catalog.-) it.c OPERATOR(pg_catalog.+) it.r,
			   it.p, p_headers
		  FROM items AS it
		  JOIN locked AS l ON l.key OPERATOR(pg_catalog.=) it.k COLLATE "C"
		RETURNING m.id, m.key, m.position)
	INSERT INTO inbox.outbox_deliveries AS d (id, target, topic, key, position)
	SELECT ms.id, r.target, p_topic, ms.key, ms.position
	  FROM messages AS ms
	 CROSS JOIN inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	-- A snapshot older than the insert's wait: see outbox_unroute
	IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
		PERFORM FROM inbox.outbox_routes AS r
		  WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C" FOR KEY SHARE;
	END IF;

	PERFORM inbox.outbox_wake(r.target) FROM inbox.outbox_routes AS r
	 WHERE r.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C";
	RETURN ids;
END
$$;

/* ------------------------------------------------------------------------
 * Outbox: a retried send is compared without its trace context
 */
-- Headers without the trace context (traceparent, tracestate, in any
-- case), NULL when nothing else is left: what a retried send's headers
-- are compared on, since a retry may run under another trace
CREATE FUNCTION inbox.outbox_untraced(headers jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.jsonb_object_agg(e.key, e.value)
	  FROM pg_catalog.jsonb_each(headers) AS e
	 WHERE pg_catalog.lower(e.key COLLATE "C") OPERATOR(pg_catalog.<>) ALL (ARRAY['traceparent', 'tracestate'])
$$;

CREATE OR REPLACE FUNCTION inbox.outbox_same(old inbox.outbox_messages, p_topic text, p_key text,
								  p_payload jsonb, p_bytes bytea, p_headers jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF (old.topic, old.key, old.payload, old.payload_bytes, inbox.outbox_untraced(old.headers))
	   IS DISTINCT FROM (p_topic, p_key, p_payload, p_bytes, inbox.outbox_untraced(p_headers)) THEN
		RAISE EXCEPTION 'outbox message % was sent with other content', old.id
			USING ERRCODE = 'IB002',
				  DETAIL = CASE WHEN old.topic OPERATOR(pg_catalog.=) p_topic COLLATE "C" THEN
							   pg_catalog.format('It was sent to this topic with key "%s"; its topic, key, '
												 'payload and headers (but their trace context) must all be the same again.',
												 inbox.quote(old.key))
						   ELSE 'It was not sent to this topic; its topic, key, payload and headers '
								'(but their trace context) must all be the same again.' END,
				  HINT = 'A retried send keeps its id and its content; a new message needs a new id.';
	END IF;
END
$$;

REVOKE ALL ON FUNCTION inbox.outbox_untraced(jsonb) FROM PUBLIC;
