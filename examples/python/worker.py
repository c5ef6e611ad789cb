#!/usr/bin/env python3
"""Deferred mode, the working half: poll with receipts, apply, complete.

inbox_poll takes up to BATCH_SIZE pending messages under a lease, waiting up
to WAIT seconds for one to arrive; the take commits at once.  Each message
then gets its own transaction: the invoice and inbox_complete by receipt
commit together.  A worker that dies leaves its messages to come back when
their lease runs out; an effect that fails gives the message back with
inbox_fail, until inbox.max_attempts makes it a dead letter.
"""

import os

import psycopg

from inbox_example import (APPLY_INVOICE, MAX_TRIES, RETRY_SQLSTATES, SCOPE, Database, Stop,
                           backoff, fault_point, log)

BATCH_SIZE = int(os.environ.get("BATCH_SIZE", "10"))
LEASE = float(os.environ.get("LEASE", "30"))          # seconds a message stays ours
WAIT = float(os.environ.get("WAIT", "20"))            # seconds a poll waits for work
RETRY_AFTER = float(os.environ.get("RETRY_AFTER", "30"))  # seconds before a failed one is retried

POLL = """
    SELECT message_id, payload::text, receipt
      FROM inbox_poll(%s, %s, lease => make_interval(secs => %s), wait => make_interval(secs => %s))"""


def poll(db):
    """The take is its own transaction, committed at once: the message is
    ours, under the lease, whatever happens to this connection next."""
    try:
        conn = db.conn()
        rows = conn.execute(POLL, (SCOPE, BATCH_SIZE, LEASE, WAIT)).fetchall()
        conn.commit()
        return rows
    except psycopg.Error as e:
        if not db.lost(e):
            raise
        # If the take committed, its messages come back when the lease ends.
        log(f"database connection lost while polling: {e}")
        db.forget()
        return []


def complete(db, message_id, payload, receipt):
    uncertain = False
    for attempt in range(MAX_TRIES):
        try:
            conn = db.conn()
            if uncertain:
                # docs/deferred-mode.md: if the COMMIT's outcome was lost
                # with the connection, state 'done' means it committed.
                row = conn.execute("SELECT state FROM inbox_status(%s, %s)",
                                   (SCOPE, message_id)).fetchone()
                conn.commit()
                if row is not None and row[0] == "done":
                    log(f"uncertain commit of {message_id}: it committed")
                    return
                # Not done: complete again with the same receipt.  If the old
                # transaction is still running, this waits for it, then
                # fails with IB004 if it committed after all.
                log(f"uncertain commit of {message_id}: not committed, processing again")
            # No begin(): this transaction claims nothing, so it needs no
            # setting (inbox.claim_timeout bounds claims and receives only).
            conn.execute(APPLY_INVOICE, {"id": message_id, "body": payload.encode(),
                                         "by": db.applied_by})
            conn.execute("SELECT inbox_complete(%s, %s::uuid)", (SCOPE, receipt))
            fault_point("before-commit", db)
            conn.commit()
            fault_point("after-commit", db)
            return
        except psycopg.Error as e:
            if db.lost(e):
                log(f"database connection lost while processing {message_id}: {e}")
                db.forget()
                uncertain = True
                backoff(attempt)
                continue
            db.rollback()
            state = e.sqlstate or ""
            if state == "IB004":
                # The receipt no longer holds the message (its lease ran out
                # and another worker took it): that worker applies it.
                log(f"{message_id}: IB004, another worker has it now")
                return
            if state in RETRY_SQLSTATES:
                log(f"{message_id}: {state}, retrying the transaction")
                backoff(attempt)
                continue
            if state[:2] in ("22", "23"):
                give_back(db, message_id, receipt, f"{state}: {e.diag.message_primary}")
                return
            raise
    # Still failing: the message comes back when its lease runs out.


def give_back(db, message_id, receipt, error):
    """inbox_fail: pending again after RETRY_AFTER, or dead after its last
    attempt (inbox.max_attempts), then listed in inbox_dead_letters."""
    try:
        conn = db.conn()
        state = conn.execute("SELECT inbox_fail(%s, %s::uuid, %s, make_interval(secs => %s))",
                             (SCOPE, receipt, error, RETRY_AFTER)).fetchone()[0]
        conn.commit()
        log(f"{message_id}: {error}; now {state}")
    except psycopg.Error as e:
        # The lease brings the message back anyway.
        log(f"{message_id}: inbox_fail failed: {e}")
        db.rollback()


def main():
    stop = Stop()
    db = Database("worker")
    log(f"working on scope {SCOPE}")
    while not stop.requested:
        messages = poll(db)
        if messages:
            fault_point("after-poll", db)     # test hook: a crash with messages in hand
        for message_id, payload, receipt in messages:
            complete(db, message_id, payload, receipt)


if __name__ == "__main__":
    main()
