#!/usr/bin/env python3
"""Claim, effect and outbox in one transaction: the middle of a pipeline.

For each invoice of QUEUE: BEGIN; inbox_claim(SCOPE, message_id, sha256 of
the body); if it is the first claim, INSERT the invoice and
outbox_send(TOPIC, customer, notice); COMMIT; then ack.  The notice leaves
only if the transaction commits, and inbox-relay delivers it after the
commit, under the outbox id, in commit order per customer.  A redelivery
of the invoice finds the committed claim: no second invoice, no second
notice.  See README.md beside this file.

ROLLBACK_RATE (a test hook, 0 by default) makes that fraction of the
transactions take a send back: half by a savepoint rolled back after the
send, half by a serialization failure after it, which rolls the whole
transaction back and retries it.  The attempt of a taken-back send ends
in "-rb", so a test can see that none ever arrives.
"""

import json
import os
import random
import uuid

from inbox_example import (APPLY_INVOICE, QUEUE, SCOPE, Database, Stop, answer_broker,
                           broker_channel, deliver, log, sha256)

TOPIC = os.environ.get("TOPIC", "invoice-booked")
ROLLBACK_RATE = float(os.environ.get("ROLLBACK_RATE", "0"))

SEND = "SELECT outbox_send(%s, %s, %s::jsonb)"


def notice(message_id, body, attempt):
    invoice = json.loads(body)
    return invoice["customer"], json.dumps({
        "source": message_id, "number": invoice["number"],
        "amount": invoice["amount"], "attempt": attempt})


def forward(db, message_id, body):
    """The claim, the invoice and its notice, in the one transaction
    deliver() commits."""
    def work(conn):
        fresh = conn.execute("SELECT inbox_claim(%s, %s, %s)",
                             (SCOPE, message_id, sha256(body))).fetchone()[0]
        if not fresh:
            return False
        conn.execute(APPLY_INVOICE, {"id": message_id, "body": body, "by": db.applied_by})
        attempt = uuid.uuid4().hex
        fault = random.random() < ROLLBACK_RATE
        if fault and random.random() < 0.5:
            # Taken back by a savepoint: this send never leaves
            key, payload = notice(message_id, body, attempt + "-rb")
            conn.execute("SAVEPOINT notice")
            conn.execute(SEND, (TOPIC, key, payload))
            conn.execute("ROLLBACK TO SAVEPOINT notice")
            log(f"{message_id}: a send taken back by a savepoint (test hook)")
            fault = False
        key, payload = notice(message_id, body, attempt + ("-rb" if fault else ""))
        conn.execute(SEND, (TOPIC, key, payload))
        if fault:
            # The whole transaction rolls back after its send; deliver()
            # retries it, as it retries any serialization failure
            conn.execute("DO $$ BEGIN RAISE EXCEPTION 'test hook: roll back after the send' "
                         "USING ERRCODE = '40001'; END $$")
        return True
    return deliver(db, message_id, sha256(body), work)


def main():
    stop = Stop()
    db = Database("forwarder")
    connection, channel = broker_channel(prefetch=10)
    log(f"forwarding {QUEUE} into scope {SCOPE}, notices to {TOPIC}")
    for method, properties, body in channel.consume(QUEUE, inactivity_timeout=1):
        if stop.requested:
            break
        if method is None:
            continue
        if not properties.message_id:
            answer_broker(channel, method.delivery_tag, "rejected")
            continue
        answer_broker(channel, method.delivery_tag, forward(db, properties.message_id, body))
    channel.cancel()
    connection.close()


if __name__ == "__main__":
    main()
