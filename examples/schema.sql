-- examples/schema.sql - the business table that the example consumers write.
--
-- Run once, after CREATE EXTENSION inbox, in the database the consumers use:
--   psql -f examples/schema.sql
--
-- One row per invoice applied.  There is deliberately no unique constraint
-- on message_id: the inbox claim is what keeps each message to one effect,
-- and a second effect would show here as a second row (the test counts them).
CREATE TABLE invoices (
    message_id text NOT NULL,
    number     text NOT NULL,
    customer   text NOT NULL,
    amount     numeric NOT NULL CHECK (amount >= 0),
    applied_by text NOT NULL,               -- which consumer process applied it
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON invoices (message_id);

-- The notices that python/downstream.py applies: one row per outbox message
-- forwarder.py sent and inbox-relay delivered, with its key (the customer)
-- and position, in the order they were applied (seq).  No unique constraint
-- either: the claim keeps each notice to one row.
CREATE TABLE notices (
    seq        bigserial PRIMARY KEY,
    message_id text NOT NULL,
    customer   text NOT NULL,
    position   bigint NOT NULL,
    source     text NOT NULL,               -- the invoice the notice is about
    attempt    text NOT NULL,               -- the forwarder's transaction that sent it
    applied_by text NOT NULL
);
