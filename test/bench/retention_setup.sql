/*
 * test/bench/retention_setup.sql
 *
 * Schema of each database of the retention benchmark (retention.sh, run
 * from bench.sh).  Every phase gets a fresh database, so that one phase's
 * dead rows, scopes and clocks cannot weigh on the next.
 *
 * Only what claim.sql needs besides the extension: the business table of
 * the claim benchmark (setup.sql), the same definition.
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
