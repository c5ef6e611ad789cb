/*-------------------------------------------------------------------------
 *
 * daemon.h
 *	  inbox-relay: what the supervisor (inbox-relay.c) shares with the
 *	  loops of its children (loop.c, ingest.c) and the table of transports
 *	  and sources (transports.c).  The transports and sources never
 *	  include it.
 *
 * relay/daemon.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_RELAY_DAEMON_H
#define INBOX_RELAY_DAEMON_H

#include <signal.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "relay.h"

/* The most targets and sources one relay serves */
#define RELAY_MAX_TARGETS 64

/*
 * The command line's options, set once by relay_parse_options() (options.c)
 * before any fork
 */
typedef struct RelayOptions
{
	const char *conninfo;
	const char *secrets_path;	/* --secrets, or NULL */
	int			batch;			/* --batch */
	int			lease_seconds;	/* --lease */
	int			wait_seconds;	/* --wait */
	bool		once;			/* --once */
	const char *targets[RELAY_MAX_TARGETS];	/* --target, each */
	int			ntargets;
	const char *sources[RELAY_MAX_TARGETS];	/* --source, each */
	int			nsources;
	int			refresh_seconds;	/* --refresh */
	const char *metrics_address;	/* --metrics, or NULL */
} RelayOptions;

extern RelayOptions relay_options;

/*
 * options.c: the command line into relay_options; -1 when the relay is to
 * run, else the exit status of a command that ends there (--help, --version,
 * a wrong option)
 */
extern int	relay_parse_options(int argc, char **argv);

/* Set by SIGTERM and SIGINT: finish the batches in hand, then exit */
extern volatile sig_atomic_t relay_stopping;

/* While a child waits in outbox_fetch, SIGTERM cancels it through this */
extern PGcancel *volatile relay_fetch_cancel;

/* transports.c */
extern const RelayTransport *relay_transport_for(const char *target);
extern const char *relay_schemes(char *buf, size_t size);

extern const RelaySource *relay_source_for(const char *source);
extern const char *relay_source_schemes(char *buf, size_t size);

/* secrets.c */
extern char *relay_secret_for(const char *target);

/* loop.c */
extern PGconn *relay_connect_db(void);
extern int	relay_deliver_target(const char *target);

/*
 * relay_deliver_target's exit status when this relay cannot serve the
 * target's scheme: not started again while the routes name the target
 */
#define RELAY_EXIT_UNSERVED 3

/*
 * metrics.c: what this process did since it started, for its heartbeat;
 * times on the monotonic clock (relay_now)
 */
typedef struct RelayCounts
{
	double		started;
	double		last_fetch;
	uint64_t	delivered;
	uint64_t	failed;
} RelayCounts;

extern RelayCounts relay_counts;
extern int	relay_metrics_start(const char *address);
extern void relay_metrics_child(const char *target);
extern double relay_metrics_fetched(int n);
extern void relay_metrics_settled(const RelayResult *results, int n, double started);
extern void relay_metrics_counted(int delivered, int n, double started);
extern void relay_metrics_dead(void);

/* heartbeat.c */
extern void relay_beat_fetched(PGconn *conn, const char *target, bool busy);
extern void relay_beat_idle(PGconn *conn, const char *target);

/* ingest.c: a child that reads a subscription's source into its scope */
extern int	relay_ingest(const char *scope, const char *source);
extern void relay_ingest_free(RelayIngest *m, int n);

/* check.c: inbox-relay check CONNINFO */
extern int	relay_check_main(int argc, char **argv);

#endif							/* INBOX_RELAY_DAEMON_H */
