"""What the inbox consumers of this directory share.

- configuration from the environment;
- one database connection, reconnected when it is lost;
- the one transaction of a delivery: its retries (40001, 40P01, IB003),
  its answers (applied, duplicate, mismatch, rejected) and the README's
  uncertain-commit procedure after a lost connection;
- the broker topology: a durable queue whose rejected messages go to a
  dead-letter queue;
- fault_point(), the hook through which the test crashes a consumer at an
  exact point.  It does nothing unless EXAMPLE_FAULT is set.
"""

import hashlib
import os
import random
import signal
import sys
import time

import pika
import psycopg

# The database comes from libpq's own variables: PGHOST, PGPORT, PGUSER,
# PGDATABASE, PGPASSWORD, PGOPTIONS.
AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
QUEUE = os.environ.get("QUEUE", "invoices")
DEAD_QUEUE = QUEUE + ".dead"
SCOPE = os.environ.get("SCOPE", "billing")
# Longest wait for a claim that another, unfinished transaction holds
# (the same message delivered twice at once); then IB003 and a retry.
CLAIM_TIMEOUT_MS = int(os.environ.get("CLAIM_TIMEOUT_MS", "5000"))

# Tries of one transaction before the message goes back to the broker.
MAX_TRIES = 8

# Worth running the same transaction again: a serialization failure, a
# deadlock, or a claim still held by another consumer's open transaction.
# Nothing of the failed try was committed, so a retry cannot double anything.
RETRY_SQLSTATES = {"40001", "40P01", "IB003"}

# How the business effect is written: the invoice comes from the message
# body, which PostgreSQL parses (invalid UTF-8 or JSON, a missing field or a
# negative amount raise a class 22 or 23 error: the message is bad).
APPLY_INVOICE = """
    INSERT INTO invoices (message_id, number, customer, amount, applied_by)
    SELECT %(id)s, p->>'number', p->>'customer', (p->>'amount')::numeric, %(by)s
      FROM (SELECT convert_from(%(body)s, 'UTF8')::jsonb AS p) AS m"""


def log(text):
    print(f"[{os.getpid()}] {text}", file=sys.stderr, flush=True)


def sha256(body):
    """The payload hash: of the bytes the broker delivered, the same on
    every redelivery."""
    return hashlib.sha256(body).digest()


def backoff(attempt):
    """Sleep a little longer after each failed try, with jitter so that
    two consumers that collided do not collide again."""
    time.sleep(min(2.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.0))


class Stop:
    """Set by SIGTERM or SIGINT: finish the delivery in hand, then stop."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_):
        self.requested = True


class Database:
    """One connection, opened again after it was lost."""

    def __init__(self, role):
        self.name = f"inbox-example python {role}"
        self.applied_by = f"python {role} {os.getpid()}"
        self._conn = None

    def conn(self):
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    def _connect(self):
        for attempt in range(10):
            try:
                # psycopg runs every statement in a transaction that only
                # commit() or rollback() ends: what this code wants.
                return psycopg.connect(application_name=self.name)
            except psycopg.OperationalError as e:
                log(f"cannot connect to the database ({e}); retrying")
                backoff(attempt)
        raise SystemExit("the database stays unreachable")

    def lost(self, error):
        """Was the connection lost?  Then the outcome of an unfinished
        COMMIT is unknown."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return True
        return isinstance(error, psycopg.OperationalError) and (
            error.sqlstate is None or error.sqlstate[:2] == "08"
            or error.sqlstate in ("57P01", "57P02", "57P03"))

    def forget(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
        self._conn = None

    def rollback(self):
        try:
            if self._conn is not None:
                self._conn.rollback()
        except psycopg.Error:
            self.forget()


def begin(conn):
    """Start a transaction that claims.  Its first statement sets the claim
    timeout, local to the transaction (set_config(..., true) is SET LOCAL),
    and psycopg's implicit BEGIN opens the transaction with it: call it only
    when none is open (on a new connection, after commit() or rollback()).
    The setting ends with the COMMIT or ROLLBACK.  Nothing is set on the
    session, so this works the same behind a transaction-mode pooler
    (PgBouncer's pool_mode = transaction), which runs each transaction on
    whichever server session is free: a session-level SET would reach only
    the transactions that happen to land on that session, and stay behind
    for other clients.  CLAIM_TIMEOUT_MS 0 makes the claim wait until the
    other transaction ends (or lock_timeout expires)."""
    conn.execute("SELECT set_config('inbox.claim_timeout', %s, true)", (str(CLAIM_TIMEOUT_MS),))


def deliver(db, message_id, digest, work):
    """Run work(conn) -> bool and COMMIT, once per delivery, and say what to
    tell the broker:

      'applied'    work returned True and committed: ack
      'duplicate'  already processed: ack without doing anything
      'mismatch'   IB002, the id came before with other content: dead-letter
      'rejected'   the message itself is bad (class 22 or 23): dead-letter
      'retry'      still failing after MAX_TRIES: give it back to the broker

    work runs the claim (or receive) and the effect in the transaction this
    function commits: they commit together or not at all.
    """
    uncertain = False
    for attempt in range(MAX_TRIES):
        try:
            conn = db.conn()
            if uncertain:
                # README, "Uncertain commits", step 1: a row for this id
                # means the claim committed, and the effect with it.  Its
                # hash must be ours, or the row is another message's with
                # the same id, which the normal path reports as IB002.
                row = conn.execute("SELECT payload_hash FROM inbox_status(%s, %s)",
                                   (SCOPE, message_id)).fetchone()
                conn.commit()
                if row is not None and row[0] == digest:
                    log(f"uncertain commit of {message_id}: it committed, acking")
                    return "duplicate"
                # Step 2: no row means "not committed yet".  Process it again:
                # if the old transaction is still running, the claim waits
                # for it, so there is exactly one effect either way.
                log(f"uncertain commit of {message_id}: not committed, processing again")
            begin(conn)
            fresh = work(conn)
            fault_point("before-commit", db, fresh)
            conn.commit()
            fault_point("after-commit", db, fresh)
            return "applied" if fresh else "duplicate"
        except psycopg.Error as e:
            if db.lost(e):
                log(f"database connection lost while processing {message_id}: {e}")
                db.forget()
                uncertain = True
                backoff(attempt)
                continue
            db.rollback()
            state = e.sqlstate or ""
            if state in RETRY_SQLSTATES:
                log(f"{message_id}: {state}, retrying the transaction")
                backoff(attempt)
                continue
            if state == "IB001":        # inbox.on_duplicate = 'raise'
                return "duplicate"
            if state == "IB002":
                log(f"ALERT {message_id}: IB002 payload mismatch, dead-lettered: {e.diag.message_detail}")
                return "mismatch"
            if state[:2] in ("22", "23"):
                log(f"{message_id}: {state} {e.diag.message_primary}, dead-lettered")
                return "rejected"
            raise       # anything else is a bug or an outage: crash loudly
    return "retry"


def answer_broker(channel, delivery_tag, outcome):
    """Ack only after COMMIT returned: a crash before this line leaves the
    message unacked, and the broker delivers it again, which the claim then
    recognises.  An ack before COMMIT could lose the message."""
    if outcome in ("applied", "duplicate"):
        channel.basic_ack(delivery_tag)
    elif outcome in ("mismatch", "rejected"):
        # requeue=False routes it to the dead-letter queue (see declare_queues)
        channel.basic_reject(delivery_tag, requeue=False)
    else:
        channel.basic_nack(delivery_tag, requeue=True)


def broker_channel(prefetch):
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    declare_queues(channel)
    channel.basic_qos(prefetch_count=prefetch)
    return connection, channel


def declare_queues(channel):
    """QUEUE, whose rejected messages RabbitMQ moves to QUEUE.dead.  Every
    consumer declares them the same way (the Node.js examples too)."""
    channel.queue_declare(DEAD_QUEUE, durable=True)
    channel.queue_declare(QUEUE, durable=True, arguments={
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": DEAD_QUEUE,
    })


# --- test hook ---------------------------------------------------------------
#
# EXAMPLE_FAULT=point:action:n makes the n-th pass through fault_point(point)
# of a transaction that applied something either crash the process with
# SIGKILL (action "kill") or close the database connection under the code, as
# a network failure would, so that this step fails with a lost connection
# (action "drop").  Unset, it does nothing.

_fault = os.environ.get("EXAMPLE_FAULT", "").split(":")
_passes = 0


def fault_point(point, db, applied=True):
    global _passes
    if len(_fault) != 3 or _fault[0] != point or not applied:
        return
    _passes += 1
    if _passes != int(_fault[2]):
        return
    log(f"fault injected: {_fault[1]} at {point}")
    if _fault[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    db.forget()
    raise psycopg.OperationalError("connection lost (fault injected)")
