--
-- setup: the extension and the helpers the other regress tests share
--
CREATE EXTENSION inbox;

CREATE SCHEMA regress;

-- regress.try(sql): run a statement and report "ok" or "SQLSTATE: message
-- [detail]", so that one line shows both what failed and its code.  The
-- first-received time in details changes every run, so it is masked.
CREATE FUNCTION regress.try(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
	msg text;
	det text;
BEGIN
	EXECUTE cmd;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || msg ||
		coalesce(' [' || regexp_replace(nullif(det, ''), '\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d', '<time>', 'g') || ']', '');
END $$;

-- The same, for a statement that must leave no row behind: also reports
-- how many inbox entries it added.
CREATE FUNCTION regress.try_rows(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	before bigint;
	result text;
BEGIN
	SELECT count(*) INTO before FROM inbox.entries;
	result := regress.try(cmd);
	RETURN result || ' (+' || ((SELECT count(*) FROM inbox.entries) - before) || ' rows)';
END $$;

GRANT USAGE ON SCHEMA regress TO PUBLIC;
