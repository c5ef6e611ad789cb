-- test/bench/complete_many.sql
--
-- The receipts of one batch of 100 polled messages, completed by one
-- inbox_complete_many call in one transaction.
SELECT nextval('complete_next') AS b \gset
SELECT count(*) FROM inbox_complete_many(:scope, (SELECT receipts FROM complete_batches WHERE b = :b))
 WHERE status = 'completed';
