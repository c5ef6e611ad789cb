/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Shims for the PostgreSQL APIs that differ between the versions the
 *	  extension builds against (13 to 18).  Only APIs that really changed
 *	  belong here.
 *
 * src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_COMPAT_H
#define INBOX_COMPAT_H

#include "utils/guc.h"

/* MarkGUCPrefixReserved replaced EmitWarningsOnPlaceholders in 15 */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

#endif							/* INBOX_COMPAT_H */
