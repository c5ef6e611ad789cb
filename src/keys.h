/*-------------------------------------------------------------------------
 *
 * keys.h
 *	  Checks on the arguments every API function shares (keys, payload
 *	  hashes, durations and a receive's not_before), and safe quoting of
 *	  caller strings in messages.
 *
 * src/keys.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_KEYS_H
#define INBOX_KEYS_H

#include "datatype/timestamp.h"
#include "fmgr.h"

extern text *inbox_check_key_datum(Datum value, bool isnull,
								   const char *argname, int maxbytes);
extern bytea *inbox_check_hash_datum(Datum value, bool isnull,
									 const char *argname);
extern text *inbox_key_arg(FunctionCallInfo fcinfo, int argno,
						   const char *argname, int maxbytes);
extern bytea *inbox_hash_arg(FunctionCallInfo fcinfo, int argno);
extern Interval *inbox_check_duration(const Interval *value, const char *argname);
extern void inbox_check_not_before(TimestampTz not_before);
extern int	inbox_bucket(const text *scope, const text *message_id);
/* inbox.bucket(); direct_layout.c checks that entries_bucket calls it */
extern PGDLLEXPORT Datum inbox_bucket_sql(PG_FUNCTION_ARGS);
extern int	inbox_scope_leaf(const text *scope);
extern char *inbox_quote(const text *t);
extern char *inbox_hex(const bytea *b);
extern int	inbox_array_arg(FunctionCallInfo fcinfo, int argno, const char *name, Oid type,
							Datum **elems, bool **nulls);

#endif							/* INBOX_KEYS_H */
