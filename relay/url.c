/*-------------------------------------------------------------------------
 *
 * url.c
 *	  inbox-relay: reading a target's URL, for the transports and the loop.
 *
 * A route's target is a URL whose query string holds the options of its
 * transport; values are percent-decoded here, once, so that every
 * transport reads them the same way.
 *
 * relay/url.c
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "relay.h"

/* Decode %XX escapes of len bytes of s, into a new string */
char *
relay_url_decode(const char *s, size_t len)
{
	char	   *out = malloc(len + 1);
	size_t		i,
				o = 0;

	for (i = 0; i < len; i++)
	{
		if (s[i] == '%' && i + 2 < len && isxdigit((unsigned char) s[i + 1]) &&
			isxdigit((unsigned char) s[i + 2]))
		{
			char		hex[3] = {s[i + 1], s[i + 2], 0};

			out[o++] = (char) strtol(hex, NULL, 16);
			i += 2;
		}
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

/* The decoded value of the query parameter name of url, or NULL */
char *
relay_url_param(const char *url, const char *name)
{
	const char *q = strchr(url, '?');
	size_t		nlen = strlen(name);

	while (q != NULL)
	{
		const char *p = q + 1;
		const char *end = p + strcspn(p, "&#");

		if ((size_t) (end - p) > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=')
			return relay_url_decode(p + nlen + 1, end - p - nlen - 1);
		q = *end == '&' ? end : NULL;
	}
	return NULL;
}

/* url without its query string */
char *
relay_url_without_query(const char *url)
{
	return strndup(url, strcspn(url, "?#"));
}
