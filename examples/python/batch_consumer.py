#!/usr/bin/env python3
"""Batch mode: up to BATCH_SIZE deliveries, one transaction, then the acks.

inbox_claim_many claims the whole batch in one call; the invoices of the
ids it reports 'claimed' are inserted in the same transaction; after COMMIT
the batch is acked, and its mismatches are dead-lettered.  A batch that
fails on a bad message is split: each of its messages then goes through the
claim mode's path, which dead-letters only the bad one.
"""

import os

import psycopg

import consumer
from inbox_example import (APPLY_INVOICE, MAX_TRIES, QUEUE, RETRY_SQLSTATES, SCOPE, Database,
                           Stop, answer_broker, backoff, begin, broker_channel, fault_point, log,
                           sha256)

BATCH_SIZE = int(os.environ.get("BATCH_SIZE", "50"))
# How long to wait for more messages before a partial batch goes.
BATCH_WAIT = float(os.environ.get("BATCH_WAIT", "0.2"))

CLAIM_MANY = """
    SELECT ordinality, status
      FROM inbox_claim_many(%s, %s::text[], %s::bytea[], on_mismatch => 'return')"""

# What each status of inbox_claim_many tells the broker
OUTCOME = {"claimed": "applied", "duplicate": "duplicate", "mismatch": "mismatch"}


def process_batch(db, batch):
    """batch: a list of (message_id, body).  Returns one outcome per
    message (see inbox_example.deliver), or None if the batch must be split."""
    ids = [message_id for message_id, _ in batch]
    hashes = [sha256(body) for _, body in batch]
    uncertain = False
    for attempt in range(MAX_TRIES):
        try:
            conn = db.conn()
            if uncertain:
                # README "Uncertain commits", for a batch: if every id has a
                # row with our hash, the batch committed; ack it all.
                # Otherwise process the batch again: committed ids come back
                # as duplicates, and a claim still held by the old
                # transaction waits for it.
                (ours,) = conn.execute(
                    """SELECT count(*) FILTER (WHERE s.payload_hash = h)
                         FROM unnest(%s::text[], %s::bytea[]) AS m(id, h)
                         LEFT JOIN LATERAL inbox_status(%s, m.id) AS s ON true""",
                    (ids, hashes, SCOPE)).fetchone()
                conn.commit()
                if ours == len(ids):
                    log(f"uncertain commit of a batch of {len(ids)}: it committed, acking")
                    return ["duplicate"] * len(ids)
                log(f"uncertain commit of a batch of {len(ids)}: not committed, processing again")
            begin(conn)     # the claim timeout, for this transaction only
            statuses = [None] * len(ids)
            for ordinality, status in conn.execute(CLAIM_MANY, (SCOPE, ids, hashes)):
                statuses[ordinality - 1] = status
            # Join on the position, not the id: a batch may hold two copies
            # of one id, and only the first is 'claimed'.
            with conn.cursor() as cur:
                cur.executemany(APPLY_INVOICE, [
                    {"id": message_id, "body": body, "by": db.applied_by}
                    for (message_id, body), status in zip(batch, statuses) if status == "claimed"])
            applied = "claimed" in statuses
            fault_point("before-commit", db, applied)
            conn.commit()
            fault_point("after-commit", db, applied)
            for message_id, status in zip(ids, statuses):
                if status == "mismatch":
                    log(f"ALERT {message_id}: IB002 payload mismatch, dead-lettered")
            return [OUTCOME[status] for status in statuses]
        except psycopg.Error as e:
            if db.lost(e):
                log(f"database connection lost while processing a batch: {e}")
                db.forget()
                uncertain = True
                backoff(attempt)
                continue
            db.rollback()
            state = e.sqlstate or ""
            if state in RETRY_SQLSTATES:
                log(f"batch of {len(ids)}: {state}, retrying the transaction")
                backoff(attempt)
                continue
            if state[:2] in ("22", "23"):
                log(f"batch of {len(ids)}: {state} {e.diag.message_primary}, splitting it")
                return None
            raise
    return ["retry"] * len(ids)


def flush(db, channel, deliveries):
    batch = []
    for method, properties, body in deliveries:
        if properties.message_id:
            batch.append((method, properties.message_id, body))
        else:
            log("a message without message_id, dead-lettered")
            answer_broker(channel, method.delivery_tag, "rejected")
    if not batch:
        return
    outcomes = process_batch(db, [(message_id, body) for _, message_id, body in batch])
    if outcomes is None:
        # A bad message failed the batch: process them one by one, so that
        # only the bad one is dead-lettered.
        outcomes = [consumer.claim_and_apply(db, message_id, body) for _, message_id, body in batch]
    for (method, _, _), outcome in zip(batch, outcomes):
        answer_broker(channel, method.delivery_tag, outcome)


def main():
    stop = Stop()
    db = Database("batch")
    # The broker hands out at most one batch of unacked messages at a time.
    connection, channel = broker_channel(prefetch=BATCH_SIZE)
    log(f"consuming {QUEUE} into scope {SCOPE}, batches of up to {BATCH_SIZE}")
    deliveries = []
    for method, properties, body in channel.consume(QUEUE, inactivity_timeout=BATCH_WAIT):
        if method is not None:
            deliveries.append((method, properties, body))
        if deliveries and (method is None or len(deliveries) >= BATCH_SIZE):
            flush(db, channel, deliveries)
            deliveries = []
        if stop.requested and not deliveries:
            break
    channel.cancel()
    connection.close()


if __name__ == "__main__":
    main()
