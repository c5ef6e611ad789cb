/*-------------------------------------------------------------------------
 *
 * spi.h
 *	  The one home of the extension's SPI and catalog plumbing: checked
 *	  connections and executions, plans kept for the backend, the per-leaf
 *	  plan tables of the hot paths, and the lookup of its own tables.
 *
 * src/spi.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_SPI_H
#define INBOX_SPI_H

#include "executor/spi.h"

#include "entries.h"

/* The most parameters a statement of the extension takes */
#define INBOX_SPI_MAX_ARGS	10

/*
 * A statement run on the one leaf of inbox.entries that holds a scope:
 * its name (for errors), its SQL, in which %d stands for the leaf number,
 * and its parameters' types, which end at the first InvalidOid.  A table
 * of these, indexed by an enum, describes a module's hot statements; each
 * module keeps an SPIPlanPtr[INBOX_LEAVES] per statement, filled on first
 * use by inbox_leaf_plan().
 */
typedef struct InboxLeafStatement
{
	const char *name;
	const char *sql;
	Oid			argtypes[INBOX_SPI_MAX_ARGS];
} InboxLeafStatement;

extern void inbox_spi_connect(void);
extern uint64 inbox_spi_check(int rc, int expected, const char *what);
extern int	inbox_statement_nargs(const Oid *argtypes);

extern SPIPlanPtr inbox_keep_plan(const char *sql, int nargs, const Oid *argtypes,
								  int cursor_options);
extern SPIPlanPtr inbox_plan(SPIPlanPtr *slot, const char *sql, int nargs,
							 const Oid *argtypes);
extern SPIPlanPtr inbox_leaf_plan(const InboxLeafStatement *stmt, SPIPlanPtr *slots,
								  int leaf);

extern uint64 inbox_execute_plan(SPIPlanPtr plan, const Datum *values, const char *nulls,
								 int expected, const char *what);
extern uint64 inbox_execute_plan_read_only(SPIPlanPtr plan, const Datum *values,
										   const char *nulls, int expected, const char *what);
extern int	inbox_execute_once(const char *sql, int nargs, const Oid *argtypes,
							   const Datum *values, const char *nulls, bool read_only,
							   long count);
extern uint64 inbox_execute(const char *sql, int nargs, const Oid *argtypes,
							const Datum *values, const char *nulls, int expected);
extern uint64 inbox_execute_alone(const char *sql, int nargs, const Oid *argtypes,
								  const Datum *values, const char *nulls, int expected);

extern Oid	inbox_relid(const char *relname);

#endif							/* INBOX_SPI_H */
