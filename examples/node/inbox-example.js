// What the inbox consumers of this directory share:
//
// - configuration from the environment;
// - one database connection, opened again when it is lost;
// - the one transaction of a delivery: its retries (40001, 40P01, IB003),
//   its answers (applied, duplicate, mismatch, rejected) and the README's
//   uncertain-commit procedure after a lost connection;
// - the broker topology: a durable queue whose rejected messages go to a
//   dead-letter queue;
// - faultPoint(), the hook through which the test crashes a consumer at an
//   exact point.  It does nothing unless EXAMPLE_FAULT is set.
'use strict';

const crypto = require('node:crypto');
const amqp = require('amqplib');
const pg = require('pg');

// The database comes from libpq's variables, which node-postgres reads too:
// PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, PGOPTIONS.
const AMQP_URL = process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2F';
const QUEUE = process.env.QUEUE || 'invoices';
const DEAD_QUEUE = `${QUEUE}.dead`;
const SCOPE = process.env.SCOPE || 'billing';
// Longest wait for a claim that another, unfinished transaction holds (the
// same message delivered twice at once); then IB003 and a retry.
const CLAIM_TIMEOUT_MS = Number(process.env.CLAIM_TIMEOUT_MS || 5000);

// Tries of one transaction before the message goes back to the broker.
const MAX_TRIES = 8;

// Worth running the same transaction again: a serialization failure, a
// deadlock, or a claim still held by another consumer's open transaction.
// Nothing of the failed try was committed, so a retry cannot double anything.
const RETRY_SQLSTATES = new Set(['40001', '40P01', 'IB003']);

// How the business effect is written: the invoice comes from the message
// body, which PostgreSQL parses (invalid UTF-8 or JSON, a missing field or a
// negative amount raise a class 22 or 23 error: the message is bad).
// $1 message id, $2 body (bytea), $3 who applied it.
const APPLY_INVOICE = `
    INSERT INTO invoices (message_id, number, customer, amount, applied_by)
    SELECT $1, p->>'number', p->>'customer', (p->>'amount')::numeric, $3
      FROM (SELECT convert_from($2::bytea, 'UTF8')::jsonb AS p) AS m`;

function log(text) {
  process.stderr.write(`[${process.pid}] ${text}\n`);
}

// The payload hash: of the bytes the broker delivered, the same on every
// redelivery.
function sha256(body) {
  return crypto.createHash('sha256').update(body).digest();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Sleep a little longer after each failed try, with jitter so that two
// consumers that collided do not collide again.
function backoff(attempt) {
  return sleep(Math.min(2000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2));
}

// One connection, opened again after it was lost.
class Database {
  constructor(role) {
    this.name = `inbox-example node ${role}`;
    this.appliedBy = `node ${role} ${process.pid}`;
    this.client = null;
  }

  async conn() {
    if (this.client === null) this.client = await this.connect();
    return this.client;
  }

  async connect() {
    for (let attempt = 0; attempt < 10; attempt++) {
      const client = new pg.Client({ application_name: this.name });
      // Without a listener, an error on an idle connection (the server
      // ended it) would crash the process; the next query reports it.
      client.on('error', (e) => log(`database connection error: ${e.message}`));
      try {
        await client.connect();
        return client;
      } catch (e) {
        log(`cannot connect to the database (${e.message}); retrying`);
        client.end().catch(() => {});
        await backoff(attempt);
      }
    }
    throw new Error('the database stays unreachable');
  }

  // Was the connection lost?  Then the outcome of an unfinished COMMIT is
  // unknown.  A server error has a five-character SQLSTATE; a connection
  // lost has none (or a socket code such as ECONNRESET), or is 08xxx, or
  // the server ended the session (57P01 to 57P03).
  static lost(error) {
    const code = error.code || '';
    return !/^[0-9A-Z]{5}$/.test(code) || code.startsWith('08') || /^57P0[123]$/.test(code);
  }

  forget() {
    if (this.client !== null) this.client.end().catch(() => {});
    this.client = null;
  }

  async rollback() {
    try {
      if (this.client !== null) await this.client.query('ROLLBACK');
    } catch (e) {
      this.forget();
    }
  }
}

// BEGIN, then the settings of a transaction that claims, local to it
// (set_config(..., true) is SET LOCAL): they end with its COMMIT or ROLLBACK.
// Nothing is set on the session, so this works the same behind a
// transaction-mode pooler (PgBouncer's pool_mode = transaction), which runs
// each transaction on whichever server session is free: a session-level SET
// would reach only the transactions that happen to land on that session,
// and stay behind for other clients.  CLAIM_TIMEOUT_MS 0 makes the claim
// wait until the other transaction ends (or lock_timeout expires).
async function begin(client) {
  await client.query('BEGIN');
  await client.query("SELECT set_config('inbox.claim_timeout', $1, true)", [String(CLAIM_TIMEOUT_MS)]);
}

// Programming errors are not database outcomes: let them crash.
function isBug(error) {
  return error instanceof TypeError || error instanceof RangeError || error instanceof ReferenceError;
}

// Run work(client) -> boolean and COMMIT, once per delivery, and say what to
// tell the broker:
//   'applied'    work returned true and committed: ack
//   'duplicate'  already processed: ack without doing anything
//   'mismatch'   IB002, the id came before with other content: dead-letter
//   'rejected'   the message itself is bad (class 22 or 23): dead-letter
//   'retry'      still failing after MAX_TRIES: give it back to the broker
// work runs the claim (or receive) and the effect in the transaction this
// function commits: they commit together or not at all.
async function deliver(db, messageId, digest, work) {
  let uncertain = false;
  for (let attempt = 0; attempt < MAX_TRIES; attempt++) {
    try {
      const client = await db.conn();
      if (uncertain) {
        // README, "Uncertain commits", step 1: a row for this id means the
        // claim committed, and the effect with it.  Its hash must be ours,
        // or the row is another message's with the same id, which the
        // normal path reports as IB002.
        const { rows } = await client.query('SELECT payload_hash FROM inbox_status($1, $2)', [SCOPE, messageId]);
        if (rows.length === 1 && rows[0].payload_hash !== null && digest.equals(rows[0].payload_hash)) {
          log(`uncertain commit of ${messageId}: it committed, acking`);
          return 'duplicate';
        }
        // Step 2: no row means "not committed yet".  Process it again: if
        // the old transaction is still running, the claim waits for it, so
        // there is exactly one effect either way.
        log(`uncertain commit of ${messageId}: not committed, processing again`);
      }
      await begin(client);
      const fresh = await work(client);
      await faultPoint('before-commit', db, fresh);
      await client.query('COMMIT');
      await faultPoint('after-commit', db, fresh);
      return fresh ? 'applied' : 'duplicate';
    } catch (e) {
      if (isBug(e)) throw e;
      if (Database.lost(e)) {
        log(`database connection lost while processing ${messageId}: ${e.message}`);
        db.forget();
        uncertain = true;
        await backoff(attempt);
        continue;
      }
      await db.rollback();
      const state = e.code;
      if (RETRY_SQLSTATES.has(state)) {
        log(`${messageId}: ${state}, retrying the transaction`);
        await backoff(attempt);
        continue;
      }
      if (state === 'IB001') return 'duplicate'; // inbox.on_duplicate = 'raise'
      if (state === 'IB002') {
        log(`ALERT ${messageId}: IB002 payload mismatch, dead-lettered: ${e.detail}`);
        return 'mismatch';
      }
      if (state.startsWith('22') || state.startsWith('23')) {
        log(`${messageId}: ${state} ${e.message}, dead-lettered`);
        return 'rejected';
      }
      throw e; // anything else is a bug or an outage: crash loudly
    }
  }
  return 'retry';
}

// Ack only after COMMIT returned: a crash before this line leaves the
// message unacked, and the broker delivers it again, which the claim then
// recognises.  An ack before COMMIT could lose the message.
function answerBroker(channel, msg, outcome) {
  if (outcome === 'applied' || outcome === 'duplicate') {
    channel.ack(msg);
  } else if (outcome === 'mismatch' || outcome === 'rejected') {
    channel.reject(msg, false); // not requeued: to the dead-letter queue
  } else {
    channel.nack(msg, false, true);
  }
}

async function brokerChannel(prefetch) {
  const connection = await amqp.connect(AMQP_URL);
  // A broker that goes away ends the process; unacked messages are then
  // delivered again, to this consumer once restarted or to another.
  connection.on('error', (e) => log(`broker connection error: ${e.message}`));
  connection.on('close', () => {
    if (!stopping) fatal(new Error('the broker connection closed'));
  });
  const channel = await connection.createChannel();
  await declareQueues(channel);
  await channel.prefetch(prefetch);
  return { connection, channel };
}

// QUEUE, whose rejected messages RabbitMQ moves to QUEUE.dead.  Every
// consumer declares them the same way (the Python examples too).
async function declareQueues(channel) {
  await channel.assertQueue(DEAD_QUEUE, { durable: true });
  await channel.assertQueue(QUEUE, {
    durable: true,
    arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': DEAD_QUEUE },
  });
}

// SIGTERM or SIGINT: finish the delivery in hand, then stop.
let stopping = false;
function onStop(callback) {
  const stop = () => {
    if (stopping) return;
    stopping = true;
    callback();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

function fatal(error) {
  log(`fatal: ${error.stack || error}`);
  process.exit(1);
}

// --- test hook ---------------------------------------------------------------
//
// EXAMPLE_FAULT=point:action:n makes the n-th pass through faultPoint(point)
// of a transaction that applied something either crash the process with
// SIGKILL (action "kill") or close the database connection under the code,
// as a network failure would, so that this step fails with a lost
// connection (action "drop").  Unset, it does nothing.
const fault = (process.env.EXAMPLE_FAULT || '').split(':');
let passes = 0;

async function faultPoint(point, db, applied = true) {
  if (fault.length !== 3 || fault[0] !== point || !applied) return;
  passes += 1;
  if (passes !== Number(fault[2])) return;
  log(`fault injected: ${fault[1]} at ${point}`);
  if (fault[1] === 'kill') {
    process.kill(process.pid, 'SIGKILL');
    await sleep(10000); // never reached
  }
  db.forget();
  const lost = new Error('connection lost (fault injected)');
  lost.code = 'ECONNRESET';
  throw lost;
}

module.exports = {
  AMQP_URL, QUEUE, DEAD_QUEUE, SCOPE, MAX_TRIES, RETRY_SQLSTATES, APPLY_INVOICE,
  log, sha256, backoff, sleep, Database, begin, isBug, deliver, answerBroker, brokerChannel,
  declareQueues, onStop, fatal, faultPoint, isStopping: () => stopping,
};
