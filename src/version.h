/*-------------------------------------------------------------------------
 *
 * version.h
 *	  Which version of the extension's SQL objects this library serves.
 *
 * src/version.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_VERSION_H
#define INBOX_VERSION_H

/* The release this library belongs to, and the SQL it installs */
#define INBOX_LIBRARY_VERSION	"1.0.0"

/*
 * The SQL versions whose C entry points this library still serves, besides
 * its own: the previous release, so that claims go on working between
 * "make install" and "ALTER EXTENSION inbox UPDATE".
 */
#define INBOX_PREVIOUS_SQL_VERSION	"0.4.0"

extern void version_init(void);
extern char *inbox_sql_version(void);
extern void inbox_require_previous_sql(void);

#endif							/* INBOX_VERSION_H */
