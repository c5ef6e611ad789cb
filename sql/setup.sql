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
	-- Types are schema-qualified: the security test calls this helper with
	-- a search_path whose "text" is a hostile domain.
	st pg_catalog.text;
	msg pg_catalog.text;
	det pg_catalog.text;
BEGIN
	EXECUTE cmd;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || msg ||
		coalesce(' [' || regexp_replace(CASE WHEN det OPERATOR(pg_catalog.=) '' THEN NULL ELSE det END, '\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d', '<time>', 'g') || ']', '');
END $$;

-- The same, for a statement that must leave no row behind: also reports
-- how many inbox entries it added.
CREATE FUNCTION regress.try_rows(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	before bigint;
	result pg_catalog.text;
BEGIN
	SELECT pg_catalog.count(*) INTO before FROM inbox.entries;
	result := regress.try(cmd);
	RETURN result || ' (+' || ((SELECT pg_catalog.count(*) FROM inbox.entries) - before) || ' rows)';
END $$;

-- What a take hands out now in a scope, as "id" list, in take order; the
-- messages stay taken by this session.
CREATE FUNCTION regress.take_ids(p_scope text, n integer DEFAULT 100) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce(string_agg(message_id, ' '), '-') FROM inbox_take(p_scope, n)
$$;

GRANT USAGE ON SCHEMA regress TO PUBLIC;
