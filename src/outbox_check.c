/*-------------------------------------------------------------------------
 *
 * outbox_check.c
 *	  The checks of the outbox's arguments, before anything is written:
 *	  topics and keys (their length and their characters), headers,
 *	  payload sizes and targets, and the limits they enforce; and the
 *	  caller's trace context, which a send adds to its headers.
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
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/jsonb.h"

#include "distributed.h"
#include "inbox.h"
#include "keys.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(inbox_outbox_check);
PG_FUNCTION_INFO_V1(inbox_outbox_check_headers);
PG_FUNCTION_INFO_V1(inbox_outbox_trace_headers);
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

/* ------------------------------------------------------------------------
 * Trace context
 *
 * inbox.traceparent and inbox.tracestate hold the caller's W3C trace
 * context, which a send copies into the message's headers under the same
 * names.  The application sets them per transaction (SET LOCAL, or
 * set_config(name, value, true)), so that a transaction pooler's next
 * transaction on the session never inherits them; a session-level SET
 * would.  Each value is checked when it is set, so that a send never
 * fails on a setting it did not make, and the send reads the variables
 * themselves: no catalog lookup per call.
 * ------------------------------------------------------------------------
 */

static char *trace_parent = NULL;
static char *trace_state = NULL;

/* The longest tracestate W3C Trace Context asks vendors to propagate */
#define TRACESTATE_MAX_BYTES 512
/* The most list-members a tracestate may have */
#define TRACESTATE_MAX_MEMBERS 32

static bool
is_lower_hex(const char *s, int len, bool *all_zero)
{
	*all_zero = true;
	for (int i = 0; i < len; i++)
	{
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
		if (s[i] != '0')
			*all_zero = false;
	}
	return true;
}

/*
 * version "00", a 32-digit trace id and a 16-digit parent id, neither all
 * zeros, and 2 digits of flags, all lowercase hex, joined by dashes.
 */
static bool
check_traceparent(char **newval, void **extra, GucSource source)
{
	const char *v = *newval;
	bool		zero;
	bool		parent_zero;

	if (v == NULL || v[0] == '\0')
		return true;
	if (strlen(v) == 55 && strncmp(v, "00-", 3) == 0 && v[35] == '-' && v[52] == '-' &&
		is_lower_hex(v + 3, 32, &zero) && !zero &&
		is_lower_hex(v + 36, 16, &parent_zero) && !parent_zero &&
		is_lower_hex(v + 53, 2, &zero))
		return true;
	GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
	GUC_check_errdetail("A traceparent is \"00-\", a trace id of 32 lowercase hex digits, \"-\", "
						"a parent id of 16, \"-\" and 2 of flags, and neither id is all zeros.");
	GUC_check_errhint("Set it per transaction from the incoming request's traceparent header, "
					  "with SET LOCAL, or to '' for none.");
	return false;
}

static bool
is_key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		c == '*' || c == '/';
}

/*
 * One list-member of a tracestate, s[0 .. len - 1] without its optional
 * white space: key "=" value, W3C Trace Context's syntax.
 */
static bool
tracestate_member(const char *s, int len)
{
	const char *eq = memchr(s, '=', len);
	const char *at;
	int			klen;
	int			vlen;

	if (eq == NULL)
		return false;
	klen = eq - s;
	vlen = len - klen - 1;
	at = memchr(s, '@', klen);
	if (at == NULL)
	{
		/* simple-key: lcalpha, then up to 255 key characters */
		if (klen < 1 || klen > 256 || !(s[0] >= 'a' && s[0] <= 'z'))
			return false;
		for (int i = 1; i < klen; i++)
			if (!is_key_char(s[i]))
				return false;
	}
	else
	{
		/* tenant-id "@" system-id */
		int			tlen = at - s;
		int			slen = klen - tlen - 1;

		if (tlen < 1 || tlen > 241 || slen < 1 || slen > 14 ||
			!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')) ||
			!(at[1] >= 'a' && at[1] <= 'z'))
			return false;
		for (int i = 1; i < tlen; i++)
			if (!is_key_char(s[i]))
				return false;
		for (int i = 2; i <= slen; i++)
			if (!is_key_char(at[i]))
				return false;
	}
	/* value: up to 256 printable ASCII characters but "," and "=", not ending in a space */
	if (vlen < 1 || vlen > 256 || eq[vlen] == ' ')
		return false;
	for (int i = 1; i <= vlen; i++)
		if (eq[i] < 0x20 || eq[i] > 0x7e || eq[i] == ',' || eq[i] == '=')
			return false;
	return true;
}

/* At most 512 bytes of at most 32 list-members, joined by commas */
static bool
check_tracestate(char **newval, void **extra, GucSource source)
{
	const char *v = *newval;
	int			len;
	int			members = 0;
	int			start = 0;
	bool		valid;

	if (v == NULL || v[0] == '\0')
		return true;
	len = strlen(v);
	valid = len <= TRACESTATE_MAX_BYTES;
	if (valid)
	{
		for (int i = 0; i <= len; i++)
		{
			int			b = start;
			int			e = i;

			if (i < len && v[i] != ',')
				continue;
			start = i + 1;
			while (b < e && (v[b] == ' ' || v[b] == '\t'))
				b++;
			while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
				e--;
			/* an empty list-member is allowed, and not counted */
			if (b == e)
				continue;
			if (!tracestate_member(v + b, e - b) || ++members > TRACESTATE_MAX_MEMBERS)
			{
				valid = false;
				break;
			}
		}
	}
	if (valid)
		return true;
	GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
	GUC_check_errdetail("A tracestate is at most %d bytes of at most %d list-members key=value, "
						"separated by commas, as W3C Trace Context defines them.",
						TRACESTATE_MAX_BYTES, TRACESTATE_MAX_MEMBERS);
	GUC_check_errhint("Set it per transaction from the incoming request's tracestate header, "
					  "with SET LOCAL, or to '' for none.");
	return false;
}

void
outbox_trace_init(void)
{
	DefineCustomStringVariable("inbox.traceparent",
							   "The W3C traceparent that outbox_send copies into a message's headers.",
							   "Set it per transaction, with SET LOCAL: a session-level SET outlives the "
							   "transaction, and behind a transaction pooler reaches other clients' sends. "
							   "An explicit traceparent header wins.",
							   &trace_parent,
							   "",
							   PGC_USERSET,
							   0,
							   check_traceparent, NULL, NULL);
	DefineCustomStringVariable("inbox.tracestate",
							   "The W3C tracestate that outbox_send copies into a message's headers.",
							   "Set it per transaction, with SET LOCAL, beside inbox.traceparent; it is "
							   "copied only with a traceparent.",
							   &trace_state,
							   "",
							   PGC_USERSET,
							   0,
							   check_tracestate, NULL, NULL);
}

/* Whether headers (an object) has a header named name, in any case */
static bool
has_header(Jsonb *headers, const char *name)
{
	JsonbIterator *it = JsonbIteratorInit(&headers->root);
	JsonbValue	v;
	JsonbIteratorToken token;
	int			len = strlen(name);

	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY && v.val.string.len == len &&
			pg_strncasecmp(v.val.string.val, name, len) == 0)
			return true;
	}
	return false;
}

static void
push_header(JsonbParseState **state, const char *name, const char *value)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = unconstify(char *, name);
	v.val.string.len = strlen(name);
	(void) pushJsonbValue(state, WJB_KEY, &v);
	v.val.string.val = unconstify(char *, value);
	v.val.string.len = strlen(value);
	(void) pushJsonbValue(state, WJB_VALUE, &v);
}

/*
 * A send's headers (0 for none, else checked) with the trace context of
 * the settings added: the settings' traceparent, and their tracestate with
 * it, unless the headers name a traceparent of their own (in any case),
 * since a tracestate belongs to its traceparent; an explicit tracestate
 * wins over the setting's.  Returns the headers to store, 0 for none.
 * Without a traceparent set, the headers as they are, at no cost.
 */
Datum
outbox_trace_headers(Datum headers)
{
	JsonbParseState *state = NULL;
	Jsonb	   *given = NULL;
	Datum		trace;

	if (trace_parent == NULL || trace_parent[0] == '\0')
		return headers;
	if (headers != (Datum) 0)
	{
		given = DatumGetJsonbP(headers);
		if (!JB_ROOT_IS_OBJECT(given) || has_header(given, "traceparent"))
			return headers;
	}
	(void) pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	push_header(&state, "traceparent", trace_parent);
	if (trace_state != NULL && trace_state[0] != '\0' &&
		(given == NULL || !has_header(given, "tracestate")))
		push_header(&state, "tracestate", trace_state);
	trace = JsonbPGetDatum(JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL)));
	if (given == NULL)
		return trace;
	return DirectFunctionCall2(jsonb_concat, trace, JsonbPGetDatum(given));
}

/*
 * inbox.outbox_trace_headers(headers jsonb) -> jsonb: outbox_trace_headers,
 * for the sends written in SQL (outbox_send_many), after their check of
 * headers.
 */
Datum
inbox_outbox_trace_headers(PG_FUNCTION_ARGS)
{
	Datum		headers = outbox_trace_headers(PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0));

	if (headers == (Datum) 0)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(headers);
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
