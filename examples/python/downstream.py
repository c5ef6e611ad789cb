#!/usr/bin/env python3
"""The next consumer: notices that inbox-relay publishes, each applied once.

Consumes QUEUE, declared with single-active-consumer and read with prefetch
1, so that the one active consumer takes each customer's notices in the
order the relay published them, which is their commit order.  For each:
BEGIN; inbox_claim(SCOPE, the AMQP message_id, which is the outbox id);
if it is the first claim, INSERT the notice; COMMIT; then ack.  A notice
the relay published twice (it died before its acknowledgement) carries the
same id the second time, and the claim makes it a duplicate.  The route's
target has outbox_headers=true, so each notice also carries its key and
position (outbox-key, outbox-position), which are recorded with it.
"""

import json

import pika

from inbox_example import (AMQP_URL, QUEUE, SCOPE, Database, Stop, answer_broker, deliver,
                           log, sha256)

APPLY_NOTICE = """
    INSERT INTO notices (message_id, customer, position, source, attempt, applied_by)
    VALUES (%(id)s, %(key)s, %(position)s, %(source)s, %(attempt)s, %(by)s)"""


def apply(db, properties, body):
    headers = properties.headers or {}
    if "outbox-position" not in headers:
        raise SystemExit(f"notice {properties.message_id} carries no outbox-position header: "
                         "its route's target needs outbox_headers=true")
    notice = json.loads(body)

    def work(conn):
        fresh = conn.execute("SELECT inbox_claim(%s, %s, %s)",
                             (SCOPE, properties.message_id, sha256(body))).fetchone()[0]
        if fresh:
            conn.execute(APPLY_NOTICE, {
                "id": properties.message_id, "key": headers.get("outbox-key"),
                "position": int(headers.get("outbox-position")), "source": notice["source"],
                "attempt": notice["attempt"], "by": db.applied_by})
        return fresh
    return deliver(db, properties.message_id, sha256(body), work)


def main():
    stop = Stop()
    db = Database("downstream")
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True, arguments={"x-single-active-consumer": True})
    channel.basic_qos(prefetch_count=1)
    log(f"applying {QUEUE} into scope {SCOPE}")
    for method, properties, body in channel.consume(QUEUE, inactivity_timeout=1):
        if stop.requested:
            break
        if method is None:
            continue
        answer_broker(channel, method.delivery_tag, apply(db, properties, body))
    channel.cancel()
    connection.close()


if __name__ == "__main__":
    main()
