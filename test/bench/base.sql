/*
 * test/bench/base.sql
 *
 * What every benchmark database starts with: the extension and the
 * business table that the consumer transactions write to.  setup.sql
 * (the claim variants) includes it; retention.sh gives every phase a fresh
 * database made from it, so that one phase's dead rows, scopes and clocks
 * cannot weigh on the next; deferred.sh uses it too.
 */
\set ON_ERROR_STOP on
SET client_min_messages = warning;

CREATE EXTENSION inbox;

CREATE TABLE orders (
	order_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id text NOT NULL,
	amount_cents bigint NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);

ANALYZE;
