/*-------------------------------------------------------------------------
 *
 * outbox_check.c
 *	  The checks of the outbox's arguments, before anything is written:
 *	  topics and keys (their length and their characters), headers,
 *	  payload sizes and targets, and the limits they enforce.
 *
 * A send refuses what no target can carry, since the relay cannot send
 * it anywhere and the transaction that sent it has committed by then:
 * control characters in topics and keys, and headers that are not an
 * object of strings with token names and single-line values.  What only
 * some targets refuse (an AMQP routing key over 255 bytes) is left to
 * them: that message fails there alone.
 *
 * src/outbox_check.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "distributed.h"
#include "inbox.h"
#include "keys.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(inbox_outbox_check);
PG_FUNCTION_INFO_V1(inbox_outbox_check_headers);
PG_FUNCTION_INFO_V1(inbox_outbox_check_target);
PG_FUNCTION_INFO_V1(inbox_outbox_limits);

/* Raise 22004 if argument argno, named argname, is NULL */
static void
refuse_null(FunctionCallInfo fcinfo, int argno, const char *argname, const char *hint)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname),
				 errhint("%s", hint)));
}

/*
 * Raise 22023 if t, a topic or a key, holds a control character (Unicode
 * category Cc: U+0000 to U+001F, U+007F, and U+0080 to U+009F, which
 * only a UTF-8 database spells as 0xC2 0x80 to 0x9F).  A relay puts
 * topics and keys into HTTP header fields and AMQP properties, where a CR
 * or LF would end the field and start another (an injected header, or a
 * smuggled request) and the others are invalid: a target can carry none
 * of them, so the send refuses them before anything is written.  One pass
 * over the bytes, at most the key's limit.
 */
static void
refuse_control(const text *t, const char *argname)
{
	const unsigned char *s = (const unsigned char *) VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	bool		utf8 = GetDatabaseEncoding() == PG_UTF8;

	for (int i = 0; i < len; i++)
	{
		unsigned int cp;

		if (s[i] < 0x20 || s[i] == 0x7F)
			cp = s[i];
		else if (utf8 && s[i] == 0xC2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9F)
			cp = s[i + 1];
		else
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain control characters", argname),
				 errdetail("The %s \"%s\" has U+%04X at byte %d.",
						   argname, inbox_quote(t), cp, i + 1),
				 errhint("Topics and keys travel in message headers, which cannot carry control "
						 "characters; encode binary identifiers, for example in hex.")));
	}
}

/*
 * inbox.outbox_check(topic text, key text, payload_bytes bigint): the
 * checks of a send, before it writes anything.  The outbox stays off a
 * distributed inbox (distributed.c says why).
 */
Datum
inbox_outbox_check(PG_FUNCTION_ARGS)
{
	inbox_refuse_if_distributed(INBOX_REFUSE_OUTBOX);
	refuse_null(fcinfo, 0, "topic",
				"Every message goes to a topic, which its routes name.");
	refuse_control(inbox_key_arg(fcinfo, 0, "topic", INBOX_MAX_TOPIC_BYTES), "topic");
	refuse_null(fcinfo, 1, "key",
				"A key orders the messages that share it; give every message of one entity the same key.");
	refuse_control(inbox_key_arg(fcinfo, 1, "key", INBOX_MAX_OUTBOX_KEY_BYTES), "key");
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null"),
				 errhint("Send an empty object ('{}') for a message without content.")));
	if (PG_GETARG_INT64(2) > INBOX_MAX_OUTBOX_PAYLOAD_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("payload is too large"),
				 errdetail("The payload takes %lld bytes; the limit is %d bytes.",
						   (long long) PG_GETARG_INT64(2), INBOX_MAX_OUTBOX_PAYLOAD_BYTES),
				 errhint("Store large content elsewhere and send a reference to it.")));
	PG_RETURN_VOID();
}

/* The longest header name a target takes: AMQP's field names are shortstr */
#define OUTBOX_MAX_HEADER_NAME_BYTES 255

/* What a JSON value is, for the messages below */
static const char *
json_kind(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvBinary:
			return JsonContainerIsObject(v->val.binary.data) ? "object" : "array";
		default:
			return "container";
	}
}

/* A header name for a message: quoted, and cut at 64 bytes */
static char *
header_name(const JsonbValue *name)
{
	int			len = pg_mbcliplen(name->val.string.val, name->val.string.len, 64);
	char	   *quoted = inbox_quote(cstring_to_text_with_len(name->val.string.val, len));

	return len < name->val.string.len ? psprintf("%s...", quoted) : quoted;
}

/* Whether c is a tchar of RFC 9110's token, the syntax of a field name */
static bool
is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		(c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/*
 * Raise 22023 unless headers is what every target can carry: a JSON
 * object whose values are strings (no nesting, no numbers: an HTTP field
 * and an AMQP header table entry of type string hold the same thing),
 * whose names are RFC 9110 tokens of at most 255 bytes (an HTTP field
 * name, and an AMQP field name's limit), and whose values hold no CR, LF
 * or NUL (which would end an HTTP field, or a C string).  Everything else
 * about a header (a broker that refuses a name, a value too long for a
 * target) is one target's limit, and that message's own failure there.
 */
static void
check_headers(Jsonb *headers)
{
	JsonbIterator *it;
	JsonbValue	name;
	JsonbValue	value;
	JsonbIteratorToken token;

	if (!JB_ROOT_IS_OBJECT(headers))
	{
		const char *kind = "array";

		if (JB_ROOT_IS_SCALAR(headers) && JsonbExtractScalar(&headers->root, &value))
			kind = json_kind(&value);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("headers must be a JSON object of strings"),
				 errdetail("They are a JSON %s.", kind),
				 errhint("Pass headers as {\"name\": \"value\", ...}, or NULL for none.")));
	}
	it = JsonbIteratorInit(&headers->root);
	while ((token = JsonbIteratorNext(&it, &name, true)) != WJB_DONE)
	{
		const char *s;
		int			len;

		if (token != WJB_KEY)
			continue;
		(void) JsonbIteratorNext(&it, &value, true);
		s = name.val.string.val;
		len = name.val.string.len;
		if (len > OUTBOX_MAX_HEADER_NAME_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header names must be at most %d bytes", OUTBOX_MAX_HEADER_NAME_BYTES),
					 errdetail("Header \"%s\" is %d bytes long.", header_name(&name), len)));
		for (int i = 0; i < len; i++)
		{
			if (!is_tchar((unsigned char) s[i]))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header names must be RFC 9110 tokens"),
						 errdetail("Header \"%s\" has a character other than letters, digits and "
								   "!#$%%&'*+-.^_`|~ at byte %d.", header_name(&name), i + 1)));
		}
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header names must be RFC 9110 tokens"),
					 errdetail("A header name is empty.")));
		if (value.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("headers must be a JSON object of strings"),
					 errdetail("Header \"%s\" is a JSON %s.", header_name(&name), json_kind(&value)),
					 errhint("Give every header's value as a string, such as \"42\" for a number.")));
		if (memchr(value.val.string.val, '\r', value.val.string.len) != NULL ||
			memchr(value.val.string.val, '\n', value.val.string.len) != NULL ||
			memchr(value.val.string.val, '\0', value.val.string.len) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header values must not contain CR, LF or NUL"),
					 errdetail("Header \"%s\" has one.", header_name(&name)),
					 errhint("A line break would end the header; encode multi-line values.")));
	}
}

/* check_headers on a send's headers argument, not NULL (src/outbox.c) */
void
outbox_check_headers(Datum headers)
{
	check_headers(DatumGetJsonbP(headers));
}

/*
 * inbox.outbox_check_headers(headers jsonb): check_headers, for the sends
 * written in SQL.  STRICT: NULL headers are none.
 */
Datum
inbox_outbox_check_headers(PG_FUNCTION_ARGS)
{
	check_headers(PG_GETARG_JSONB_P(0));
	PG_RETURN_VOID();
}

/* inbox.outbox_check_target(target text): a route's or a fetch's target */
Datum
inbox_outbox_check_target(PG_FUNCTION_ARGS)
{
	inbox_refuse_if_distributed(INBOX_REFUSE_OUTBOX);
	refuse_null(fcinfo, 0, "target",
				"A target is the URL a route delivers to, as outbox_route was given it.");
	(void) inbox_key_arg(fcinfo, 0, "target", INBOX_MAX_TARGET_BYTES);
	PG_RETURN_VOID();
}

/*
 * inbox.outbox_limits() -> (topic_bytes, key_bytes, target_bytes,
 * payload_bytes, batch): the limits above, for the regress test that
 * compares them with the tables' CHECK constraints, and for the SQL
 * functions that check a batch.
 */
Datum
inbox_outbox_limits(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "inbox.outbox_limits() must return a record");
	values[0] = Int32GetDatum(INBOX_MAX_TOPIC_BYTES);
	values[1] = Int32GetDatum(INBOX_MAX_OUTBOX_KEY_BYTES);
	values[2] = Int32GetDatum(INBOX_MAX_TARGET_BYTES);
	values[3] = Int32GetDatum(INBOX_MAX_OUTBOX_PAYLOAD_BYTES);
	values[4] = Int32GetDatum(INBOX_OUTBOX_MAX_BATCH);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}
