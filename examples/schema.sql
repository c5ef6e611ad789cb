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
