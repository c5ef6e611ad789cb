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
#define INBOX_LIBRARY_VERSION	"1.2.0"

/*
 * The oldest SQL version that binds this library's current entry points
 * (inbox_claim_1_0 and its kin).  Every version from it up to
 * INBOX_LIBRARY_VERSION binds the same symbols: later versions only add
 * SQL objects, so the library serves them alike.
 */
#define INBOX_CURRENT_SQL_SINCE	"1.0.0"

/*
 * The older SQL version whose own C entry points this library still
 * serves, so that claims go on working between "make install" and
 * "ALTER EXTENSION inbox UPDATE".
 */
#define INBOX_PREVIOUS_SQL_VERSION	"0.4.0"

extern void version_init(void);
extern char *inbox_sql_version(void);
extern void inbox_require_previous_sql(void);
extern bool inbox_sql_served(const char *version);
extern bool inbox_sql_older_than(const char *version);

#endif							/* INBOX_VERSION_H */
