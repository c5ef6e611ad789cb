/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Checks on the (scope, message_id) key and the payload hash that every
 *	  API function shares, on the durations of the deferred mode and a
 *	  receive's not_before, and safe quoting of caller strings for messages.
 *
 * Bad input is rejected before anything is written, so an error can never
 * leave half a claim behind.  Caller strings end up in errmsg, and so in
 * the server log: they are escaped so that an id can never start a new log
 * line, forge a log prefix, or reorder text on a terminal.
 *
 * src/keys.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "entries.h"
#include "inbox.h"
#include "keys.h"

PG_FUNCTION_INFO_V1(inbox_check_key);
PG_FUNCTION_INFO_V1(inbox_check_duration_sql);
PG_FUNCTION_INFO_V1(inbox_quote_sql);
PG_FUNCTION_INFO_V1(inbox_bucket_sql);

/*
 * The bytes of t in UTF-8: t's own bytes when the database is in UTF-8, or
 * in SQL_ASCII, whose text is bytes nobody checked (they are the same
 * bytes as in UTF-8 whenever they are valid UTF-8); a converted copy
 * otherwise.
 */
static const char *
utf8_bytes(const text *t, int *len)
{
	const char *s = VARDATA_ANY(t);
	int			n = VARSIZE_ANY_EXHDR(t);
	int			encoding = GetDatabaseEncoding();
	const char *u;

	*len = n;
	if (encoding == PG_UTF8 || encoding == PG_SQL_ASCII)
		return s;
	u = pg_server_to_any(s, n, PG_UTF8);
	if (u != s)
		*len = strlen(u);
	return u;
}

/*
 * Check a key (scope or message_id) against the documented rules: not
 * NULL, not empty, at most maxbytes bytes, in the server encoding and in
 * UTF-8 (see inbox.h); return it detoasted.  argname names it in the
 * messages ("message_id", or "message_ids[3]" in a batch).  The size is
 * read from the header, so that a gigabyte-long id is refused without
 * first being decompressed into memory.
 */
text *
inbox_check_key_datum(Datum value, bool isnull, const char *argname, int maxbytes)
{
	Size		len;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname),
				 errhint("Every message needs a %s; a NULL one cannot be deduplicated.",
						 argname)));

	len = toast_raw_datum_size(value) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname)));
	if (len > (Size) maxbytes)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", argname),
				 errdetail("The %s is %zu bytes long; the limit is %d bytes.",
						   argname, len, maxbytes),
				 errhint("Use a shorter identifier, or a digest of it if the broker's ids are longer.")));

	/* Only a database in another encoding than UTF-8 can differ */
	if (GetDatabaseEncoding() != PG_UTF8 && GetDatabaseEncoding() != PG_SQL_ASCII)
	{
		text	   *key = DatumGetTextPP(value);
		int			utf8len;
		const char *utf8 = utf8_bytes(key, &utf8len);

		if (utf8 != VARDATA_ANY(key))
			pfree((char *) utf8);
		if (utf8len > maxbytes)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("%s is too long", argname),
					 errdetail("The %s is %zu bytes long, and %d bytes long in UTF-8; the limit is %d bytes in both.",
							   argname, len, utf8len, maxbytes),
					 errhint("Use a shorter identifier, or a digest of it. The limit holds in UTF-8 too, so that "
							 "a dump of this database restores into a database of any encoding.")));
		return key;
	}

	return DatumGetTextPP(value);
}

/*
 * Check an optional payload hash; NULL means "no content check".  An empty
 * hash is refused because it would compare equal to every other empty hash
 * and so disable the check without saying so.
 */
bytea *
inbox_check_hash_datum(Datum value, bool isnull, const char *argname)
{
	Size		len;

	if (isnull)
		return NULL;

	len = toast_raw_datum_size(value) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname),
				 errhint("Pass a digest such as sha256(payload), or NULL to skip the content check.")));
	if (len > INBOX_MAX_HASH_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", argname),
				 errdetail("The %s is %zu bytes long; the limit is %d bytes.",
						   argname, len, INBOX_MAX_HASH_BYTES),
				 errhint("Pass a digest of the payload, such as sha256(payload), not the payload itself.")));

	return DatumGetByteaPP(value);
}

/*
 * Fetch a key argument (scope or message_id).  The functions are not STRICT
 * on purpose: a NULL key would otherwise make inbox_claim return NULL,
 * which a consumer's IF treats as "not fresh" and silently drops the
 * message.
 */
text *
inbox_key_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
			  int maxbytes)
{
	return inbox_check_key_datum(PG_GETARG_DATUM(argno), PG_ARGISNULL(argno),
								 argname, maxbytes);
}

/* Fetch the optional payload hash argument */
bytea *
inbox_hash_arg(FunctionCallInfo fcinfo, int argno)
{
	return inbox_check_hash_datum(PG_GETARG_DATUM(argno), PG_ARGISNULL(argno),
								  "payload_hash");
}

/*
 * Check a duration (a lease, a wait, a retry delay) and return it as one
 * span of microseconds: an Interval whose days are folded into its time,
 * at 24 hours a day.  Whether it may be NULL, zero or negative, and how
 * long it may be, are the caller's to check, on the span.
 *
 * A duration's bounds are checked by comparing intervals, which count a
 * month as 30 days and a day as 24 hours; its deadline is the duration
 * added to a time.  Added to a timestamptz, a month moves by the calendar
 * (28 to 31 days) and a day by the session's time zone (23 or 25 hours
 * across a change of daylight saving time): such a duration would pass its
 * checks as one length and run as another ('1 mon -30 days 1 second'
 * compares as one second and runs for about a day).  A month has no length
 * to agree on, and is refused; a day has one, which the span keeps
 * wherever it is added.  An infinite interval (PostgreSQL 17 on) has no
 * deadline at all.
 */
Interval *
inbox_check_duration(const Interval *value, const char *argname)
{
	Interval   *span;
	int64		usecs;

	if (!inbox_interval_is_finite(value))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be finite", argname),
				 errdetail("It is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(value)))),
				 errhint("Give it in days, hours, minutes or seconds.")));
	if (value->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not have a part in months or years", argname),
				 errdetail("It is %s. A month lasts 28 to 31 days, depending on when it falls, "
						   "so a duration with one has no fixed length.",
						   DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(value)))),
				 errhint("Give it in days, hours, minutes or seconds, such as '30 days' rather than '1 month'.")));
	if (pg_mul_s64_overflow((int64) value->day, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, value->time, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is out of range", argname),
				 errdetail("It is %s, longer than the range of timestamps.",
						   DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(value)))),
				 errhint("Give a duration that ends within the range of timestamps.")));
	span = palloc0(sizeof(Interval));
	span->time = usecs;
	return span;
}

/*
 * Check a receive's not_before.  A message due at 'infinity' would stay
 * pending for ever: no take hands it out, and the purge removes only done
 * messages.  '-infinity' is allowed: a receive stores the later of
 * not_before and now, so it means "at once".
 */
void
inbox_check_not_before(TimestampTz not_before)
{
	if (TIMESTAMP_IS_NOEND(not_before))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("not_before must not be infinity"),
				 errdetail("A message due at infinity would stay pending for ever: no take would hand it out, "
						   "and the purge removes only done messages."),
				 errhint("Pass the time from which the message may be taken, or NULL to make it takeable at once.")));
}

/*
 * The bucket of a key, stored in the entry's column "bucket" (see
 * INBOX_LEAVES in inbox.h): the leaf of the scope in the high bits, a hash
 * of the whole key in the low ones.  Both hash the key's UTF-8 form, so
 * the bucket does not depend on the database's encoding: a dump restored
 * into a database of another encoding puts every entry back in the leaf
 * where claims will look for it.  (PostgreSQL's own hash partitioning
 * hashes the bytes of the server encoding, so under it such a restore
 * would route a re-encoded key into another leaf, or fail that leaf's
 * COPY.)
 *
 * 32-bit FNV-1a, then the finalizer of MurmurHash3 so that the bits taken
 * depend on every input bit: over the scope for the leaf; over the scope,
 * a 0xFF byte (which never occurs in UTF-8, so that ("ab", "c") and ("a",
 * "bc") differ) and the message id for the low bits.  Defined on bytes and
 * fixed here for good: changing it would strand every stored entry.
 */
#define FNV_OFFSET	2166136261u
#define FNV_PRIME	16777619u

static uint32
fnv1a(uint32 h, const char *s, int len)
{
	for (int i = 0; i < len; i++)
	{
		h ^= (unsigned char) s[i];
		h *= FNV_PRIME;
	}
	return h;
}

static uint32
murmur_finish(uint32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* FNV-1a of t's UTF-8 form, continuing from h */
static uint32
fnv1a_utf8(uint32 h, const text *t)
{
	int			len;
	const char *s = utf8_bytes(t, &len);

	h = fnv1a(h, s, len);
	if (s != VARDATA_ANY(t))
		pfree((char *) s);
	return h;
}

/* The leaf of a scope, from the FNV-1a of its UTF-8 form */
static int
leaf_of_scope_hash(uint32 h)
{
	return (int) (murmur_finish(h) % INBOX_LEAVES);
}

/* The leaf of inbox.entries that holds every entry of scope */
int
inbox_scope_leaf(const text *scope)
{
	return leaf_of_scope_hash(fnv1a_utf8(FNV_OFFSET, scope));
}

int
inbox_bucket(const text *scope, const text *message_id)
{
	uint32		h = fnv1a_utf8(FNV_OFFSET, scope);
	int			leaf = leaf_of_scope_hash(h);

	h = fnv1a(h, "\xff", 1);
	h = fnv1a_utf8(h, message_id);
	return (leaf << INBOX_BUCKET_KEY_BITS) |
		(int) (murmur_finish(h) & ((1u << INBOX_BUCKET_KEY_BITS) - 1));
}

/* inbox.bucket(scope text, message_id text) -> smallint: the same, for SQL */
Datum
inbox_bucket_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT16((int16) inbox_bucket(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1)));
}

/* Unicode code points that reorder or break lines on a terminal or in a log */
static bool
unsafe_code_point(pg_wchar c)
{
	return (c >= 0x80 && c <= 0x9F) ||	/* C1 controls */
		c == 0x2028 || c == 0x2029 ||	/* line and paragraph separators */
		(c >= 0x200E && c <= 0x200F) || /* directional marks */
		(c >= 0x202A && c <= 0x202E) || /* bidirectional embeddings */
		(c >= 0x2066 && c <= 0x2069) || /* bidirectional isolates */
		c == 0xFEFF;			/* byte order mark */
}

/*
 * The Unicode code point of the character of clen bytes at s, in the
 * server's encoding, or -1 if it has none.  UTF-8 is decoded directly;
 * any other encoding converts the one character to UTF-8 first, so that a
 * C1 control in LATIN1 (byte 0x85, say) is recognised as surely as in
 * UTF-8.  Only error messages quote, so the conversion's cost is no
 * concern.
 */
static int32
code_point(const unsigned char *s, int clen, int encoding)
{
	const unsigned char *utf8 = s;

	if (encoding != PG_UTF8)
	{
		utf8 = (const unsigned char *)
			pg_do_encoding_conversion((unsigned char *) s, clen, encoding, PG_UTF8);
		if (utf8 == NULL)
			return -1;
	}
	return (int32) utf8_to_unicode(utf8);
}

/*
 * Return a palloc'd copy of t that is safe inside double quotes in a
 * message: quotes and backslashes are escaped, and control characters
 * become \n, \r, \t, \xNN or \uNNNN, whatever the server encoding.
 * Printable text, including non-ASCII letters, is kept as it is so that
 * operators can still grep for an id.
 */
char *
inbox_quote(const text *t)
{
	const unsigned char *s = (const unsigned char *) VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	int			encoding = GetDatabaseEncoding();
	StringInfoData buf;
	int			i = 0;

	initStringInfo(&buf);
	while (i < len)
	{
		unsigned char c = s[i];
		int			clen;

		if (c < 0x80)
		{
			if (c == '"' || c == '\\')
			{
				appendStringInfoChar(&buf, '\\');
				appendStringInfoChar(&buf, (char) c);
			}
			else if (c == '\n')
				appendStringInfoString(&buf, "\\n");
			else if (c == '\r')
				appendStringInfoString(&buf, "\\r");
			else if (c == '\t')
				appendStringInfoString(&buf, "\\t");
			else if (c < 0x20 || c == 0x7F)
				appendStringInfo(&buf, "\\x%02X", c);
			else
				appendStringInfoChar(&buf, (char) c);
			i++;
			continue;
		}

		/* SQL_ASCII stores unchecked bytes: show them, never pass them on */
		if (encoding == PG_SQL_ASCII)
		{
			appendStringInfo(&buf, "\\x%02X", c);
			i++;
			continue;
		}

		/* The server validated the encoding; still never read past the end */
		clen = pg_mblen((const char *) s + i);
		if (clen < 1 || i + clen > len)
		{
			appendStringInfo(&buf, "\\x%02X", c);
			i++;
			continue;
		}
		{
			int32		cp = code_point(s + i, clen, encoding);

			if (cp >= 0 && unsafe_code_point((pg_wchar) cp))
				appendStringInfo(&buf, "\\u%04X", (unsigned int) cp);
			else
				appendBinaryStringInfo(&buf, (const char *) s + i, clen);
		}
		i += clen;
	}

	return buf.data;
}

/* Return a palloc'd \x... rendering of b, as bytea_out would show it */
char *
inbox_hex(const bytea *b)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *) VARDATA_ANY(b);
	int			len = VARSIZE_ANY_EXHDR(b);
	char	   *out = palloc(2 * len + 3);
	char	   *p = out;
	int			i;

	*p++ = '\\';
	*p++ = 'x';
	for (i = 0; i < len; i++)
	{
		*p++ = digits[s[i] >> 4];
		*p++ = digits[s[i] & 0x0F];
	}
	*p = '\0';
	return out;
}

/*
 * inbox.check_key(scope text, message_id text, with_id boolean) -> void:
 * the argument checks of inbox_claim, for the functions written in SQL.
 * A NULL message_id is allowed when with_id is false (functions that take
 * a scope only).
 */
Datum
inbox_check_key(PG_FUNCTION_ARGS)
{
	(void) inbox_key_arg(fcinfo, 0, "scope", INBOX_MAX_SCOPE_BYTES);
	if (PG_GETARG_BOOL(2))
		(void) inbox_key_arg(fcinfo, 1, "message_id", INBOX_MAX_MESSAGE_ID_BYTES);
	PG_RETURN_VOID();
}

/*
 * inbox.check_duration(value interval, argname text) -> interval: the
 * duration check of the C functions, and its span, for the SQL ones.
 * STRICT: a NULL duration means what its function says.
 */
Datum
inbox_check_duration_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_INTERVAL_P(inbox_check_duration(PG_GETARG_INTERVAL_P(0),
											  text_to_cstring(PG_GETARG_TEXT_PP(1))));
}

/* inbox.quote(text) -> text: a caller's string made safe for a message */
Datum
inbox_quote_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(inbox_quote(PG_GETARG_TEXT_PP(0))));
}

/*
 * inbox.limits() -> (scope_bytes, message_id_bytes, payload_hash_bytes,
 *					  group_key_bytes):
 * the limits the C code enforces, so that a test can compare them with the
 * CHECK constraints of the tables, which must say the same.
 */
PG_FUNCTION_INFO_V1(inbox_limits);

Datum
inbox_limits(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = Int32GetDatum(INBOX_MAX_SCOPE_BYTES);
	values[1] = Int32GetDatum(INBOX_MAX_MESSAGE_ID_BYTES);
	values[2] = Int32GetDatum(INBOX_MAX_HASH_BYTES);
	/* Not in 1.0.0's SQL, whose row has the first three only */
	values[3] = Int32GetDatum(INBOX_MAX_GROUP_KEY_BYTES);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * A one-dimensional array argument, deconstructed, NULL elements allowed:
 * its element count.  name is the argument's, for the error.
 */
int
inbox_array_arg(FunctionCallInfo fcinfo, int argno, const char *name, Oid type,
				Datum **elems, bool **nulls)
{
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(argno);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", name)));
	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	deconstruct_array(array, type, typlen, typbyval, typalign, elems, nulls, &n);
	return n;
}
