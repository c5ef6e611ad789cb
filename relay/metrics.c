/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  inbox-relay --metrics=HOST:PORT: Prometheus text for every child of
 *	  the supervisor on one endpoint; and the counts of this process that
 *	  the heartbeat (heartbeat.c) reports.
 *
 * The counters live in a MAP_SHARED anonymous mapping that the supervisor
 * creates before it forks anything, so that every child, and the process
 * that serves the endpoint, sees the same pages.  A target has one slot,
 * claimed by the first child that delivers to it and taken over by the
 * children started for it after that one dies: a child killed with
 * SIGKILL leaves its counts in the slot, and a counter never goes down.
 * Each counter is written by one process at a time (a target has one
 * child) with relaxed atomic adds, and read by the server with atomic
 * loads: a scrape may see one batch's counts half added, never a torn
 * value.
 *
 * The endpoint is served by a process of its own, so that a scrape costs a
 * delivering child nothing but the adds it does anyway.  It is forked
 * twice, so that the supervisor never waits for it, and it ends when the
 * supervisor ends: it watches a pipe whose only writer is the supervisor
 * (each child closes its copy at once), and the pipe's end reads as EOF.
 *
 * relay/metrics.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

/* As many targets as a supervisor can deliver to, and those it dropped */
#define METRICS_SLOTS 256
/* A target's URL as outbox_route accepts it (INBOX_MAX_TARGET_BYTES) */
#define METRICS_TARGET_BYTES 2048

/* The upper bounds of the batch duration's buckets, in seconds */
static const double bucket_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define NBUCKETS (int) (sizeof(bucket_le) / sizeof(bucket_le[0]))

enum
{
	SLOT_FREE = 0,
	SLOT_CLAIMING,
	SLOT_READY
};

typedef struct MetricsSlot
{
	int			state;			/* SLOT_*: claimed by compare-and-swap */
	pid_t		pid;			/* the child delivering to it, or 0 */
	uint64_t	delivered;		/* messages the target confirmed */
	uint64_t	failed;			/* messages it did not take (outbox_fail) */
	uint64_t	dead;			/* of those, the ones that died then */
	int64_t		in_flight;		/* fetched, not yet settled */
	uint64_t	batches;		/* batches settled */
	uint64_t	batch_us;		/* their durations' sum, in microseconds */
	uint64_t	bucket[NBUCKETS];	/* batches at most bucket_le[i] long */
	char		target[METRICS_TARGET_BYTES + 1];
} MetricsSlot;

RelayCounts relay_counts;

static MetricsSlot *slots;		/* NULL without --metrics */
static MetricsSlot *mine;		/* this child's slot, or NULL */
static int	supervisor_fd = -1; /* the write end of the server's pipe */


/*
 * A child starts delivering to target: its own counts start at zero, and
 * it takes its target's slot, the one of the children before it if there
 * was one.
 */
void
relay_metrics_child(const char *target)
{
	int			i;

	memset(&relay_counts, 0, sizeof(relay_counts));
	relay_counts.started = relay_now();
	if (supervisor_fd >= 0)
	{
		close(supervisor_fd);
		supervisor_fd = -1;
	}
	if (slots == NULL)
		return;
	for (i = 0; i < METRICS_SLOTS && mine == NULL; i++)
	{
		MetricsSlot *s = &slots[i];
		int			expected = SLOT_FREE;

		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_READY)
		{
			if (strcmp(s->target, target) == 0)
				mine = s;
			continue;
		}
		if (__atomic_compare_exchange_n(&s->state, &expected, SLOT_CLAIMING, false,
										__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		{
			snprintf(s->target, sizeof(s->target), "%s", target);
			__atomic_store_n(&s->state, SLOT_READY, __ATOMIC_RELEASE);
			mine = s;
		}
		else if (expected == SLOT_CLAIMING)
		{
			/* Another child names its slot: look again once it has */
			while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_CLAIMING)
				usleep(1000);
			i--;
		}
	}
	if (mine == NULL)
	{
		relay_log("no room for this target's metrics: the endpoint counts %d targets at most",
				  METRICS_SLOTS);
		return;
	}
	/* What a killed child before this one had in flight is settled by now */
	__atomic_store_n(&mine->in_flight, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mine->pid, getpid(), __ATOMIC_RELEASE);
}

/* A batch of n messages fetched: when it was, for its duration */
double
relay_metrics_fetched(int n)
{
	if (mine != NULL)
		__atomic_add_fetch(&mine->in_flight, n, __ATOMIC_RELAXED);
	return relay_now();
}

/*
 * A batch fetched at started settled: its outcomes, and its duration.
 * results NULL: the batch was not sent (its lease ran too short), and it
 * only leaves what is in flight.
 */
void
relay_metrics_settled(const RelayResult *results, int n, double started)
{
	int			delivered = 0;

	if (results == NULL)
	{
		if (mine != NULL)
			__atomic_sub_fetch(&mine->in_flight, n, __ATOMIC_RELAXED);
		return;
	}
	for (int i = 0; i < n; i++)
		if (results[i] == RELAY_DELIVERED)
			delivered++;
	relay_metrics_counted(delivered, n, started);
}

/*
 * A batch of n messages fetched at started settled, delivered of them
 * delivered (for a source: written into the inbox and acknowledged), the
 * others failed (handed back)
 */
void
relay_metrics_counted(int delivered, int n, double started)
{
	uint64_t	us;
	double		seconds = relay_now() - started;
	int			i;

	relay_counts.delivered += delivered;
	relay_counts.failed += n - delivered;
	if (mine == NULL)
		return;
	us = seconds > 0 ? (uint64_t) (seconds * 1e6) : 0;
	__atomic_add_fetch(&mine->delivered, delivered, __ATOMIC_RELAXED);
	__atomic_add_fetch(&mine->failed, n - delivered, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&mine->in_flight, n, __ATOMIC_RELAXED);
	for (i = 0; i < NBUCKETS; i++)
		if (seconds <= bucket_le[i])
			__atomic_add_fetch(&mine->bucket[i], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&mine->batch_us, us, __ATOMIC_RELAXED);
	__atomic_add_fetch(&mine->batches, 1, __ATOMIC_RELAXED);
}

/* A failed message is dead after its last attempt */
void
relay_metrics_dead(void)
{
	if (mine != NULL)
		__atomic_add_fetch(&mine->dead, 1, __ATOMIC_RELAXED);
}

/* --- the endpoint ------------------------------------------------------ */

/* A label value, escaped as the text format wants: \\, \" and \n */
static const char *
label(const char *value, char *buf)
{
	char	   *o = buf;

	for (; *value; value++)
	{
		if (*value == '\\' || *value == '"')
			*o++ = '\\';
		if (*value == '\n')
		{
			*o++ = '\\';
			*o++ = 'n';
			continue;
		}
		*o++ = *value;
	}
	*o = '\0';
	return buf;
}

static void
metric_head(RelayText *t, const char *name, const char *type, const char *help)
{
	relay_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The exposition of every slot named so far */
static void
exposition(RelayText *t)
{
	static const struct
	{
		const char *name;
		const char *type;
		const char *help;
		size_t		offset;
	}			simple[] = {
		{"inbox_relay_delivered_total", "counter", "Messages the target confirmed.",
		offsetof(MetricsSlot, delivered)},
		{"inbox_relay_failed_total", "counter",
			"Messages the target did not take, each recorded with outbox_fail.",
		offsetof(MetricsSlot, failed)},
		{"inbox_relay_dead_total", "counter",
			"Failed messages that were dead after their last attempt.",
		offsetof(MetricsSlot, dead)},
	};
	char	   *buf = malloc(2 * METRICS_TARGET_BYTES + 1);
	MetricsSlot *ready[METRICS_SLOTS];
	int			nslots = 0,
				i,
				k,
				b;

	for (i = 0; i < METRICS_SLOTS; i++)
		if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == SLOT_READY)
			ready[nslots++] = &slots[i];
	for (k = 0; k < (int) (sizeof(simple) / sizeof(simple[0])); k++)
	{
		metric_head(t, simple[k].name, simple[k].type, simple[k].help);
		for (i = 0; i < nslots; i++)
			relay_text_printf(t, "%s{target=\"%s\"} %llu\n", simple[k].name, label(ready[i]->target, buf),
					 (unsigned long long) __atomic_load_n((uint64_t *) ((char *) ready[i] + simple[k].offset),
														  __ATOMIC_RELAXED));
	}
	metric_head(t, "inbox_relay_in_flight", "gauge", "Messages fetched and not yet settled.");
	for (i = 0; i < nslots; i++)
		relay_text_printf(t, "inbox_relay_in_flight{target=\"%s\"} %lld\n", label(ready[i]->target, buf),
				 (long long) __atomic_load_n(&ready[i]->in_flight, __ATOMIC_RELAXED));
	metric_head(t, "inbox_relay_up", "gauge",
				"1 while a process of this relay delivers to the target, 0 while none does.");
	for (i = 0; i < nslots; i++)
	{
		pid_t		pid = __atomic_load_n(&ready[i]->pid, __ATOMIC_ACQUIRE);

		relay_text_printf(t, "inbox_relay_up{target=\"%s\"} %d\n", label(ready[i]->target, buf),
				 pid > 0 && kill(pid, 0) == 0 ? 1 : 0);
	}
	metric_head(t, "inbox_relay_batch_duration_seconds", "histogram",
				"From a batch's fetch to its outcomes recorded.");
	for (i = 0; i < nslots; i++)
	{
		MetricsSlot *s = ready[i];
		uint64_t	count = __atomic_load_n(&s->batches, __ATOMIC_RELAXED);

		label(s->target, buf);
		for (b = 0; b < NBUCKETS; b++)
			relay_text_printf(t, "inbox_relay_batch_duration_seconds_bucket{target=\"%s\",le=\"%g\"} %llu\n",
					 buf, bucket_le[b],
					 (unsigned long long) __atomic_load_n(&s->bucket[b], __ATOMIC_RELAXED));
		relay_text_printf(t, "inbox_relay_batch_duration_seconds_bucket{target=\"%s\",le=\"+Inf\"} %llu\n",
				 buf, (unsigned long long) count);
		relay_text_printf(t, "inbox_relay_batch_duration_seconds_sum{target=\"%s\"} %.6f\n",
				 buf, __atomic_load_n(&s->batch_us, __ATOMIC_RELAXED) / 1e6);
		relay_text_printf(t, "inbox_relay_batch_duration_seconds_count{target=\"%s\"} %llu\n",
				 buf, (unsigned long long) count);
	}
	free(buf);
}

static void
write_all(int fd, const char *data, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		data += n;
		len -= n;
	}
}

/* One request: GET /metrics (or /) answered, anything else 404 */
static void
serve_one(int fd)
{
	char		req[4096];
	size_t		len = 0;
	struct timeval tv = {2, 0};
	RelayText	body = {NULL, 0, 0};
	RelayText	head = {NULL, 0, 0};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (len < sizeof(req) - 1)
	{
		ssize_t		n = read(fd, req + len, sizeof(req) - 1 - len);

		if (n <= 0)
			break;
		len += n;
		req[len] = '\0';
		if (strstr(req, "\r\n\r\n") != NULL || strstr(req, "\n\n") != NULL)
			break;
	}
	req[len] = '\0';
	if (strncmp(req, "GET /metrics ", 13) == 0 || strncmp(req, "GET /metrics?", 13) == 0 ||
		strncmp(req, "GET / ", 6) == 0)
	{
		exposition(&body);
		relay_text_printf(&head, "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
				 "Content-Length: %zu\r\nConnection: close\r\n\r\n", body.len);
	}
	else
	{
		relay_text_printf(&body, "not found: the metrics are at /metrics\n");
		relay_text_printf(&head, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
				 "Content-Length: %zu\r\nConnection: close\r\n\r\n", body.len);
	}
	write_all(fd, head.data, head.len);
	if (strncmp(req, "HEAD ", 5) != 0)
		write_all(fd, body.data, body.len);
	free(head.data);
	free(body.data);
}

static void
serve(int listener, int supervisor)
{
	struct pollfd fds[2] = {{listener, POLLIN, 0}, {supervisor, POLLIN, 0}};

	for (;;)
	{
		if (poll(fds, 2, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		/* The supervisor ended: its end of the pipe is closed */
		if (fds[1].revents != 0)
			_exit(0);
		if (fds[0].revents & POLLIN)
		{
			int			fd = accept(listener, NULL, NULL);

			if (fd >= 0)
			{
				serve_one(fd);
				close(fd);
			}
		}
	}
}

/*
 * --metrics=HOST:PORT, in the supervisor before it forks a child: the
 * shared counters, the listening socket (so that a wrong address stops the
 * relay at once) and the process that serves it.  HOST may be empty (every
 * address) or bracketed ([::1]).  0, or -1 with a line on stderr.
 */
int
relay_metrics_start(const char *address)
{
	const char *colon = strrchr(address, ':');
	char	   *host;
	struct addrinfo hints,
			   *ai,
			   *p;
	int			listener = -1,
				pipefd[2],
				rc,
				one = 1;
	pid_t		pid;

	if (colon == NULL || colon[1] == '\0')
	{
		fprintf(stderr, "inbox-relay: --metrics must be HOST:PORT, not \"%s\"\n", address);
		return -1;
	}
	host = strndup(address, colon - address);
	if (host[0] == '[' && host[strlen(host) - 1] == ']')
	{
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if ((rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai)) != 0)
	{
		fprintf(stderr, "inbox-relay: --metrics=%s: %s\n", address, gai_strerror(rc));
		free(host);
		return -1;
	}
	free(host);
	for (p = ai; p != NULL && listener < 0; p = p->ai_next)
	{
		listener = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
		if (listener < 0)
			continue;
		setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(listener, p->ai_addr, p->ai_addrlen) != 0 || listen(listener, 16) != 0)
		{
			rc = errno;
			close(listener);
			listener = -1;
			errno = rc;
		}
	}
	freeaddrinfo(ai);
	if (listener < 0)
	{
		fprintf(stderr, "inbox-relay: cannot listen on %s for --metrics: %s\n", address, strerror(errno));
		return -1;
	}

	slots = mmap(NULL, METRICS_SLOTS * sizeof(MetricsSlot), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (slots == MAP_FAILED || pipe(pipefd) != 0)
	{
		fprintf(stderr, "inbox-relay: cannot set up --metrics: %s\n", strerror(errno));
		return -1;
	}

	/* Forked twice: the server is no child the supervisor waits for */
	if ((pid = fork()) < 0)
	{
		fprintf(stderr, "inbox-relay: fork failed: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0)
	{
		close(pipefd[1]);
		if (fork() == 0)
		{
			signal(SIGTERM, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			serve(listener, pipefd[0]);
		}
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	close(listener);
	close(pipefd[0]);
	supervisor_fd = pipefd[1];
	return 0;
}
