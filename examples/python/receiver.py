#!/usr/bin/env python3
"""Deferred mode, the receiving half: store each message, then ack.

inbox_receive stores the message as pending in its own short transaction;
the broker is acked after that COMMIT.  worker.py applies the effect later.
A redelivery is a duplicate in every state of the stored message, so it is
acked and stored only once.
"""

from inbox_example import (QUEUE, SCOPE, Database, Stop, answer_broker, broker_channel,
                           deliver, log, sha256)


def receive(db, message_id, body):
    def work(conn):
        # The hash is the one the claim mode uses: of the bytes delivered.
        return conn.execute(
            "SELECT inbox_receive(%s, %s, convert_from(%s, 'UTF8')::jsonb, %s)",
            (SCOPE, message_id, body, sha256(body))).fetchone()[0]
    return deliver(db, message_id, sha256(body), work)


def main():
    stop = Stop()
    db = Database("receiver")
    connection, channel = broker_channel(prefetch=10)
    log(f"receiving {QUEUE} into scope {SCOPE}")
    for method, properties, body in channel.consume(QUEUE, inactivity_timeout=1):
        if stop.requested:
            break
        if method is None:
            continue
        if not properties.message_id:
            log("a message without message_id, dead-lettered")
            outcome = "rejected"
        else:
            outcome = receive(db, properties.message_id, body)
        answer_broker(channel, method.delivery_tag, outcome)
    channel.cancel()
    connection.close()


if __name__ == "__main__":
    main()
