/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The retention launcher and its per-database purge workers.
 *
 * src/worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_WORKER_H
#define INBOX_WORKER_H

extern void worker_init(void);

extern PGDLLEXPORT void inbox_launcher_main(Datum main_arg);
extern PGDLLEXPORT void inbox_purge_main(Datum main_arg);

#endif							/* INBOX_WORKER_H */
