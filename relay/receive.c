/*-------------------------------------------------------------------------
 *
 * receive.c
 *	  inbox-relay: a batch into an inbox with inbox_receive_many.
 *
 * The messages go as array literals, in one statement, which returns each
 * one's ordinality and status; a message the inbox holds with other
 * content comes back as a mismatch (on_mismatch => 'return') rather than
 * failing its batch-mates.  All are of one kind of payload: JSON text, or
 * bytes (binary), sent as bytea's hex form.  Headers go as one JSON
 * object per message, to an inbox that takes them.
 *
 * relay/receive.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "receive.h"
#include "relay.h"

/*
 * Headers as text pairs, as a JSON object (malloc'd), or NULL for none.
 * Each name and value is a JSON string of the same bytes: quotes,
 * backslashes and control characters escaped, the rest as it is.
 */
char *
relay_headers_json(int n, const char *const *names, const char *const *values)
{
	RelayText	j = {0};

	if (n <= 0)
		return NULL;
	relay_text_append(&j, "{", 1);
	for (int h = 0; h < n; h++)
	{
		for (int part = 0; part < 2; part++)
		{
			const char *p = part == 0 ? names[h] : values[h];

			if (part == 0 && h > 0)
				relay_text_append(&j, ",", 1);
			relay_text_append(&j, "\"", 1);
			for (; *p != '\0'; p++)
			{
				unsigned char c = (unsigned char) *p;

				if (c == '"' || c == '\\')
					relay_text_printf(&j, "\\%c", c);
				else if (c < 0x20)
					relay_text_printf(&j, "\\u%04x", c);
				else
					relay_text_append(&j, p, 1);
			}
			relay_text_append(&j, part == 0 ? "\":" : "\"", part == 0 ? 2 : 1);
		}
	}
	relay_text_append(&j, "}", 1);
	return j.data;
}

/* Whether s[0 .. n) is well-formed UTF-8 (RFC 3629: no overlongs, surrogates) */
bool
relay_utf8_valid(const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t		i = 0;

	while (i < n)
	{
		unsigned char c = s[i];
		int			len;
		unsigned int cp;

		if (c < 0x80)
		{
			i++;
			continue;
		}
		len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
		if (len == 0 || i + len > n)
			return false;
		cp = c & (0x7f >> len);
		for (int k = 1; k < len; k++)
		{
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
			cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

/*
 * Why these headers cannot be an inbox message's, or NULL when they can:
 * the inbox keeps what every target can carry (its receives check it as
 * outbox_send does): names that are RFC 9110 tokens of at most 255 bytes,
 * values without CR or LF, all UTF-8.  A message whose headers would be
 * changed to fit is refused instead, so that a worker never sees headers
 * other than the ones sent.
 */
const char *
relay_headers_refusal(int n, const char *const *names, const char *const *values)
{
	for (int h = 0; h < n; h++)
	{
		size_t		len = strlen(names[h]);

		if (len == 0 || len > 255)
			return "a header name is empty or longer than 255 bytes";
		for (size_t i = 0; i < len; i++)
		{
			unsigned char c = (unsigned char) names[h][i];

			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
				  strchr("!#$%&'*+-.^_`|~", c) != NULL))
				return "a header name is not an RFC 9110 token";
		}
		if (strpbrk(values[h], "\r\n") != NULL)
			return "a header value holds CR or LF";
		if (!relay_utf8_valid(values[h], strlen(values[h])))
			return "a header value is not UTF-8";
	}
	return NULL;
}

/*
 * Receive r[0 .. count - 1] into scope; with grouped, each in the group
 * of its group_key (NULL: none); with with_headers, each with its headers
 * (NULL: none), which only an inbox of 1.2.0 or later takes.  The caller
 * clears the result.
 */
PGresult *
relay_receive_many(PGconn *conn, const char *scope, const RelayReceived *r, int count,
				   bool binary, bool grouped, bool with_headers)
{
	RelayText	ids = {0},
				payloads = {0},
				keys = {0},
				headers = {0};
	const char *params[5];
	char		sql[256];
	int			nparams = 3;
	PGresult   *res;

	relay_text_append(&ids, "{", 1);
	relay_text_append(&payloads, "{", 1);
	relay_text_append(&keys, "{", 1);
	relay_text_append(&headers, "{", 1);
	for (int i = 0; i < count; i++)
	{
		relay_text_element(&ids, r[i].id, strlen(r[i].id), false);
		relay_text_element(&payloads, r[i].body, r[i].body_len, binary);
		relay_text_element(&keys, r[i].group_key, r[i].group_key ? strlen(r[i].group_key) : 0, false);
		relay_text_element(&headers, r[i].headers, r[i].headers ? strlen(r[i].headers) : 0, false);
	}
	relay_text_append(&ids, "}", 1);
	relay_text_append(&payloads, "}", 1);
	relay_text_append(&keys, "}", 1);
	relay_text_append(&headers, "}", 1);
	params[0] = scope;
	params[1] = ids.data;
	params[2] = payloads.data;
	snprintf(sql, sizeof(sql),
			 "SELECT r.ordinality, r.status FROM inbox_receive_many($1, $2::text[], $3::%s[], "
			 "on_mismatch => 'return'%s%s) AS r",
			 binary ? "bytea" : "jsonb",
			 grouped ? ", group_keys => $4::text[]" : "",
			 with_headers ? (grouped ? ", headers => $5::jsonb[]" : ", headers => $4::jsonb[]") : "");
	if (grouped)
		params[nparams++] = keys.data;
	if (with_headers)
		params[nparams++] = headers.data;
	res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	free(ids.data);
	free(payloads.data);
	free(keys.data);
	free(headers.data);
	return res;
}
