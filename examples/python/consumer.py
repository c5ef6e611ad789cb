#!/usr/bin/env python3
"""Claim mode: one transaction per delivery, then the ack.

For each message of QUEUE: BEGIN; inbox_claim(SCOPE, message_id, sha256 of
the body); if it is the first claim, INSERT the invoice; COMMIT; then ack.
A redelivery finds the committed claim and is acked without a second
invoice.  See README.md beside this file.
"""

from inbox_example import (APPLY_INVOICE, QUEUE, SCOPE, Database, Stop, answer_broker,
                           broker_channel, deliver, log, sha256)


def claim_and_apply(db, message_id, body):
    """The claim and the effect, in the one transaction deliver() commits."""
    def work(conn):
        fresh = conn.execute("SELECT inbox_claim(%s, %s, %s)",
                             (SCOPE, message_id, sha256(body))).fetchone()[0]
        if fresh:
            conn.execute(APPLY_INVOICE, {"id": message_id, "body": body, "by": db.applied_by})
        return fresh
    return deliver(db, message_id, sha256(body), work)


def outcome_of(db, properties, body):
    if not properties.message_id:
        # Without an id that stays the same on redelivery there is nothing
        # to deduplicate on.
        log("a message without message_id, dead-lettered")
        return "rejected"
    return claim_and_apply(db, properties.message_id, body)


def main():
    stop = Stop()
    db = Database("claim")
    connection, channel = broker_channel(prefetch=10)
    log(f"consuming {QUEUE} into scope {SCOPE}")
    for method, properties, body in channel.consume(QUEUE, inactivity_timeout=1):
        if stop.requested:
            break
        if method is None:          # a second without messages
            continue
        answer_broker(channel, method.delivery_tag, outcome_of(db, properties, body))
    # Messages delivered but not processed go back to the queue.
    channel.cancel()
    connection.close()


if __name__ == "__main__":
    main()
