#!/usr/bin/env python3
"""test/tools/queues.py - what test/t/016_examples.pl asks the broker.

  queues.py count QUEUE...   one line per queue: "QUEUE READY CONSUMERS"
                             (0 0 for a queue that does not exist)
  queues.py dead QUEUE       one line per message of QUEUE: "MESSAGE_ID BODY";
                             the messages stay in the queue

The broker is AMQP_URL.  Uses Debian's python3-pika, as the examples do.
"""

import os
import sys

import pika


def main():
    command, queues = sys.argv[1], sys.argv[2:]
    connection = pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"]))
    if command == "count":
        for queue in queues:
            # A passive declare of a missing queue closes the channel: one
            # channel per queue.
            channel = connection.channel()
            try:
                ok = channel.queue_declare(queue, passive=True).method
                print(queue, ok.message_count, ok.consumer_count)
                channel.close()
            except pika.exceptions.ChannelClosedByBroker:
                print(queue, 0, 0)
    elif command == "dead":
        channel = connection.channel()
        while True:
            method, properties, body = channel.basic_get(queues[0], auto_ack=False)
            if method is None:
                break
            print(properties.message_id, body.decode())
        # Closing without an ack puts the messages back.
    connection.close()


if __name__ == "__main__":
    main()
