/*-------------------------------------------------------------------------
 *
 * text.c
 *	  inbox-relay: a string that grows as it is written, for whatever the
 *	  relay builds of unbounded size (an array literal of a batch, a
 *	  scrape's answer), so that nothing is cut to fit a fixed buffer.
 *
 * relay/text.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay.h"

/*
 * Make room for n more bytes and the terminating zero.  Out of memory the
 * process exits: a relay child is restarted by its supervisor, and
 * nothing it has not acknowledged is lost.
 */
void
relay_text_reserve(RelayText *t, size_t n)
{
	if (t->len + n + 1 > t->size)
	{
		t->size = (t->len + n + 1) * 2;
		if ((t->data = realloc(t->data, t->size)) == NULL)
		{
			relay_log("out of memory");
			_exit(1);
		}
	}
}

/* Add n bytes at p */
void
relay_text_append(RelayText *t, const char *p, size_t n)
{
	relay_text_reserve(t, n);
	memcpy(t->data + t->len, p, n);
	t->len += n;
	t->data[t->len] = '\0';
}

/* Add what fmt formats */
void
relay_text_printf(RelayText *t, const char *fmt,...)
{
	va_list		ap;
	int			n;

	relay_text_reserve(t, 0);
	va_start(ap, fmt);
	n = vsnprintf(t->data + t->len, t->size - t->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t) n >= t->size - t->len)
	{
		relay_text_reserve(t, n);
		va_start(ap, fmt);
		vsnprintf(t->data + t->len, t->size - t->len, fmt, ap);
		va_end(ap);
	}
	t->len += n;
}

/*
 * Add one element to an array literal: in double quotes, its quotes and
 * backslashes escaped; binary bytes as bytea's hex form.  Room for the
 * longest form (every byte doubled) is made once.  p NULL adds NULL.
 */
void
relay_text_element(RelayText *s, const char *p, size_t n, bool binary)
{
	static const char hex[] = "0123456789abcdef";
	char	   *out;

	relay_text_reserve(s, 2 * n + 6);
	out = s->data + s->len;
	if (s->len > 1)
		*out++ = ',';
	if (p == NULL)
	{
		memcpy(out, "NULL", 5);
		s->len = out + 4 - s->data;
		return;
	}
	*out++ = '"';
	if (binary)
	{
		memcpy(out, "\\\\x", 3);
		out += 3;
		for (size_t i = 0; i < n; i++)
		{
			*out++ = hex[(unsigned char) p[i] >> 4];
			*out++ = hex[(unsigned char) p[i] & 15];
		}
	}
	else
		for (size_t i = 0; i < n; i++)
		{
			if (p[i] == '"' || p[i] == '\\')
				*out++ = '\\';
			*out++ = p[i];
		}
	*out++ = '"';
	*out = '\0';
	s->len = out - s->data;
}
