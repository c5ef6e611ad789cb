/*-------------------------------------------------------------------------
 *
 * direct_internal.h
 *	  What direct.c's writer shares with direct_complete.c: the writer and
 *	  its leaves, and the opening of a leaf.
 *
 * src/direct_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_DIRECT_INTERNAL_H
#define INBOX_DIRECT_INTERNAL_H

#include "nodes/execnodes.h"
#include "utils/relcache.h"

#include "direct.h"
#include "entries.h"

/* What a writer keeps of one leaf, opened on first use */
typedef struct DirectLeaf
{
	int			state;			/* 0: not opened yet; 1: open; -1: take SPI */
	Relation	rel;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	List	   *arbiter;		/* its primary key, the ON CONFLICT arbiter */
	Relation	pkey;			/* that index */
	TupleTableSlot *new_slot;	/* a completion's new version */
	Relation	receipt_index;	/* its index of receipts, once opened */
} DirectLeaf;

struct InboxDirectWriter
{
	EState	   *estate;
	Oid			entries;		/* inbox.entries, locked */
	bool		pushed;			/* whether it pushed the active snapshot */
	bool		optimistic;		/* whether the next write skips the probe */
	DirectLeaf	leaves[INBOX_LEAVES];
};

extern DirectLeaf *open_leaf(InboxDirectWriter *w, int leafno);

#endif							/* INBOX_DIRECT_INTERNAL_H */
