#!/usr/bin/env python3
"""Publish sample invoices to QUEUE, the way an at-least-once producer does.

  publish.py --count 100 --duplicates 0.3      100 invoices, 30% sent twice
  publish.py --ids 5,7 --conflict               ids 5 and 7 again, with other content
  publish.py --poison                           one invoice that can never apply

Each message carries its id in the AMQP message_id property and a JSON
invoice as its body; the same id always gets byte-for-byte the same body,
unless --conflict is given.  Messages are persistent and the broker confirms
each publish.
"""

import argparse
import random

import pika

from inbox_example import AMQP_URL, QUEUE, broker_channel

PREFIX = "inv-"


def body(n, conflict=False):
    """The JSON written out, so that it is byte for byte publish.js's."""
    amount = "999999.99" if conflict else f"{n % 1000}.{n % 100:02d}"
    return f'{{"amount": "{amount}", "customer": "customer-{n % 7}", "number": "INV-{n:06d}"}}'.encode()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default=PREFIX, help="message id prefix (default inv-)")
    parser.add_argument("--count", type=int, default=0, help="invoices 1..COUNT")
    parser.add_argument("--ids", default="", help="these invoice numbers, comma-separated")
    parser.add_argument("--duplicates", type=float, default=0.0,
                        help="fraction of invoices published twice")
    parser.add_argument("--conflict", action="store_true",
                        help="publish the --ids with altered content")
    parser.add_argument("--poison", action="store_true",
                        help="also publish PREFIX + 'poison', whose amount is negative")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    numbers = list(range(1, args.count + 1)) + [int(n) for n in args.ids.split(",") if n]
    messages = [(f"{args.prefix}{n:06d}", body(n, args.conflict)) for n in numbers]
    messages += [m for m in messages if rng.random() < args.duplicates]
    rng.shuffle(messages)
    if args.poison:
        messages.append((args.prefix + "poison",
                         b'{"amount": "-1", "customer": "nobody", "number": "INV-POISON"}'))

    connection, channel = broker_channel(prefetch=1)
    channel.confirm_delivery()
    for message_id, payload in messages:
        channel.basic_publish("", QUEUE, payload, pika.BasicProperties(
            message_id=message_id, delivery_mode=2, content_type="application/json"))
    connection.close()
    print(f"published {len(messages)} messages to {QUEUE} at {AMQP_URL.split('@')[-1]}")


if __name__ == "__main__":
    main()
