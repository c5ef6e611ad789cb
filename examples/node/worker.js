#!/usr/bin/env node
// Deferred mode, the working half: poll with receipts, apply, complete.
//
// inbox_poll takes up to BATCH_SIZE pending messages under a lease, waiting
// up to WAIT seconds for one to arrive; the take commits at once.  Each
// message then gets its own transaction: the invoice and inbox_complete by
// receipt commit together.  A worker that dies leaves its messages to come
// back when their lease runs out; an effect that fails gives the message
// back with inbox_fail, until inbox.max_attempts makes it a dead letter.
'use strict';

const ex = require('./inbox-example');

const BATCH_SIZE = Number(process.env.BATCH_SIZE || 10);
const LEASE = Number(process.env.LEASE || 30); // seconds a message stays ours
const WAIT = Number(process.env.WAIT || 20); // seconds a poll waits for work
const RETRY_AFTER = Number(process.env.RETRY_AFTER || 30); // seconds before a failed one is retried

const POLL = `
    SELECT message_id, payload::text AS payload, receipt
      FROM inbox_poll($1, $2, lease => make_interval(secs => $3), wait => make_interval(secs => $4))`;

// The take is its own transaction, committed at once: the messages are
// ours, under the lease, whatever happens to this connection next.
async function poll(db) {
  try {
    const client = await db.conn();
    const { rows } = await client.query(POLL, [ex.SCOPE, BATCH_SIZE, LEASE, WAIT]);
    return rows;
  } catch (e) {
    if (ex.isBug(e) || !ex.Database.lost(e)) throw e;
    // If the take committed, its messages come back when the lease ends.
    ex.log(`database connection lost while polling: ${e.message}`);
    db.forget();
    return [];
  }
}

async function complete(db, { message_id: messageId, payload, receipt }) {
  let uncertain = false;
  for (let attempt = 0; attempt < ex.MAX_TRIES; attempt++) {
    try {
      const client = await db.conn();
      if (uncertain) {
        // docs/deferred-mode.md: if the COMMIT's outcome was lost with the
        // connection, state 'done' means it committed.
        const { rows } = await client.query('SELECT state FROM inbox_status($1, $2)', [ex.SCOPE, messageId]);
        if (rows.length === 1 && rows[0].state === 'done') {
          ex.log(`uncertain commit of ${messageId}: it committed`);
          return;
        }
        // Not done: complete again with the same receipt.  If the old
        // transaction is still running, this waits for it, then fails with
        // IB004 if it committed after all.
        ex.log(`uncertain commit of ${messageId}: not committed, processing again`);
      }
      // A plain BEGIN: this transaction claims nothing, so it needs no
      // setting (inbox.claim_timeout bounds claims and receives only).
      await client.query('BEGIN');
      await client.query(ex.APPLY_INVOICE, [messageId, Buffer.from(payload), db.appliedBy]);
      await client.query('SELECT inbox_complete($1, $2::uuid)', [ex.SCOPE, receipt]);
      await ex.faultPoint('before-commit', db);
      await client.query('COMMIT');
      await ex.faultPoint('after-commit', db);
      return;
    } catch (e) {
      if (ex.isBug(e)) throw e;
      if (ex.Database.lost(e)) {
        ex.log(`database connection lost while processing ${messageId}: ${e.message}`);
        db.forget();
        uncertain = true;
        await ex.backoff(attempt);
        continue;
      }
      await db.rollback();
      if (e.code === 'IB004') {
        // The receipt no longer holds the message (its lease ran out and
        // another worker took it): that worker applies it.
        ex.log(`${messageId}: IB004, another worker has it now`);
        return;
      }
      if (ex.RETRY_SQLSTATES.has(e.code)) {
        ex.log(`${messageId}: ${e.code}, retrying the transaction`);
        await ex.backoff(attempt);
        continue;
      }
      if (e.code.startsWith('22') || e.code.startsWith('23')) {
        await giveBack(db, messageId, receipt, `${e.code}: ${e.message}`);
        return;
      }
      throw e;
    }
  }
  // Still failing: the message comes back when its lease runs out.
}

// inbox_fail: pending again after RETRY_AFTER, or dead after its last
// attempt (inbox.max_attempts), then listed in inbox_dead_letters.
async function giveBack(db, messageId, receipt, error) {
  try {
    const client = await db.conn();
    const { rows } = await client.query(
      'SELECT inbox_fail($1, $2::uuid, $3, make_interval(secs => $4)) AS state',
      [ex.SCOPE, receipt, error, RETRY_AFTER]);
    ex.log(`${messageId}: ${error}; now ${rows[0].state}`);
  } catch (e) {
    if (ex.isBug(e)) throw e;
    // The lease brings the message back anyway.
    ex.log(`${messageId}: inbox_fail failed: ${e.message}`);
    if (ex.Database.lost(e)) db.forget();
  }
}

async function main() {
  const db = new ex.Database('worker');
  ex.onStop(() => {});
  ex.log(`working on scope ${ex.SCOPE}`);
  while (!ex.isStopping()) {
    const messages = await poll(db);
    if (messages.length > 0) await ex.faultPoint('after-poll', db); // test hook: a crash with messages in hand
    for (const m of messages) await complete(db, m);
  }
  db.forget();
}

main().catch(ex.fatal);
