--
-- limits: the limits the C code enforces (src/inbox.h) and the CHECK
-- constraints of the tables, which guard rows that arrive by COPY, say the
-- same; the outbox's too (inbox.outbox_limits()).  A change to one without the other fails here.
--
SELECT * FROM inbox.limits();

-- The byte limits as the constraints state them
SELECT conrelid::regclass AS "table", conname,
       (regexp_match(pg_get_constraintdef(oid), '(?:<=|AND)\s*(\d+)\)*$'))[1]::int AS max_bytes
FROM pg_constraint
WHERE connamespace = 'inbox'::regnamespace AND contype = 'c'
  AND pg_get_constraintdef(oid) LIKE '%octet_length%'
ORDER BY 1, 2;

-- Every length constraint agrees with the C limit of its column
SELECT count(*) AS constraints_checked,
       count(*) FILTER (WHERE max_bytes = CASE col
                                           WHEN 'scope' THEN l.scope_bytes
                                           WHEN 'message_id' THEN l.message_id_bytes
                                           WHEN 'stream' THEN l.message_id_bytes
                                           WHEN 'payload_hash' THEN l.payload_hash_bytes
                                           WHEN 'group_key' THEN l.group_key_bytes
                                           WHEN 'grantee' THEN 63
                                           WHEN 'topic' THEN o.topic_bytes
                                           WHEN 'key' THEN o.key_bytes
                                           WHEN 'target' THEN o.target_bytes
                                         END) AS agreeing
FROM (SELECT (regexp_match(pg_get_constraintdef(oid), 'octet_length\((\w+)\)'))[1] AS col,
             (regexp_match(pg_get_constraintdef(oid), '(?:<=|AND)\s*(\d+)\)*$'))[1]::int AS max_bytes
      FROM pg_constraint
      WHERE connamespace = 'inbox'::regnamespace AND contype = 'c'
        AND pg_get_constraintdef(oid) LIKE '%octet_length%') AS c,
     inbox.limits() AS l, inbox.outbox_limits() AS o;

-- And the C code accepts exactly up to them: at the limit, and one byte over
SELECT regress.try(format('SELECT inbox_claim(%L, %L, %L::bytea)',
                          repeat('s', l.scope_bytes), repeat('m', l.message_id_bytes),
                          '\x' || repeat('ab', l.payload_hash_bytes))) AS at_limit,
       regress.try(format('SELECT inbox_claim(%L, %L)', repeat('s', l.scope_bytes + 1), 'm')) AS scope_over,
       regress.try(format('SELECT inbox_claim(%L, %L)', 's', repeat('m', l.message_id_bytes + 1))) AS id_over,
       regress.try(format('SELECT inbox_claim(%L, %L, %L::bytea)', 's', 'm2',
                          '\x' || repeat('ab', l.payload_hash_bytes + 1))) AS hash_over
FROM inbox.limits() AS l;
SELECT inbox_drop_scope(repeat('s', 256));
