/*-------------------------------------------------------------------------
 *
 * log.c
 *	  inbox-relay: its log, one line per event on stderr.
 *
 * Each line carries the time in UTC, the process id and what the process
 * serves (the supervisor, or a child's target), so that the lines of a
 * supervisor and its children, written to one stream, can be told apart.
 * relay_debug lines are written only with --verbose given twice.
 *
 * relay/log.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "relay.h"

int			relay_verbose = 0;

static char log_prefix[256] = "inbox-relay";

/* What the lines of this process serve: "inbox-relay TARGET" in a child */
void
relay_log_prefix(const char *target)
{
	snprintf(log_prefix, sizeof(log_prefix), "inbox-relay %s", target);
}

/* A format checked as printf's, in the callers' prototypes */
static void log_line(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static void
log_line(const char *fmt, va_list ap)
{
	char		stamp[32];
	time_t		now = time(NULL);

	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", gmtime(&now));
	fprintf(stderr, "%s UTC [%d] %s: ", stamp, (int) getpid(), log_prefix);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void
relay_log(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

void
relay_debug(int level, const char *fmt,...)
{
	va_list		ap;

	if (relay_verbose < level)
		return;
	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

/* Seconds on a clock that only goes forward: leases, latencies, beats */
double
relay_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}
