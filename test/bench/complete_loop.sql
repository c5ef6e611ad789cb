-- test/bench/complete_loop.sql
--
-- The receipts of one batch of 100 polled messages, completed by 100
-- single inbox_complete calls in one transaction (complete_singles, a
-- PL/pgSQL loop: no round trip per call, the cheapest way to make them).
SELECT nextval('complete_next') AS b \gset
SELECT complete_singles(:scope, :b);
