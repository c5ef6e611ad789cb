#!/usr/bin/env node
// Batch mode: up to BATCH_SIZE deliveries, one transaction, then the acks.
//
// inbox_claim_many claims the whole batch in one call; the invoices of the
// ids it reports 'claimed' are inserted in the same transaction; after
// COMMIT the batch is acked, and its mismatches are dead-lettered.  A batch
// that fails on a bad message is split: each of its messages then goes
// through the claim mode's path, which dead-letters only the bad one.
'use strict';

const ex = require('./inbox-example');
const { claimAndApply } = require('./consumer');

const BATCH_SIZE = Number(process.env.BATCH_SIZE || 50);
// How long to wait for more messages before a partial batch goes.
const BATCH_WAIT_MS = Number(process.env.BATCH_WAIT_MS || 200);

const CLAIM_MANY = `
    SELECT ordinality, status
      FROM inbox_claim_many($1, $2::text[], $3::bytea[], on_mismatch => 'return')`;

// What each status of inbox_claim_many tells the broker
const OUTCOME = { claimed: 'applied', duplicate: 'duplicate', mismatch: 'mismatch' };

// batch: an array of { messageId, body }.  Returns one outcome per message
// (see deliver in inbox-example.js), or null if the batch must be split.
async function processBatch(db, batch) {
  const ids = batch.map((m) => m.messageId);
  const hashes = batch.map((m) => ex.sha256(m.body));
  let uncertain = false;
  for (let attempt = 0; attempt < ex.MAX_TRIES; attempt++) {
    try {
      const client = await db.conn();
      if (uncertain) {
        // README "Uncertain commits", for a batch: if every id has a row
        // with our hash, the batch committed; ack it all.  Otherwise process
        // the batch again: committed ids come back as duplicates, and a
        // claim still held by the old transaction waits for it.
        const { rows } = await client.query(
          `SELECT count(*) FILTER (WHERE s.payload_hash = h)::integer AS ours
             FROM unnest($1::text[], $2::bytea[]) AS m(id, h)
             LEFT JOIN LATERAL inbox_status($3, m.id) AS s ON true`,
          [ids, hashes, ex.SCOPE]);
        if (rows[0].ours === ids.length) {
          ex.log(`uncertain commit of a batch of ${ids.length}: it committed, acking`);
          return ids.map(() => 'duplicate');
        }
        ex.log(`uncertain commit of a batch of ${ids.length}: not committed, processing again`);
      }
      await ex.begin(client); // BEGIN, and the claim timeout for this transaction
      const statuses = new Array(ids.length);
      const { rows } = await client.query(CLAIM_MANY, [ex.SCOPE, ids, hashes]);
      for (const r of rows) statuses[r.ordinality - 1] = r.status;
      // By position, not by id: a batch may hold two copies of one id, and
      // only the first is 'claimed'.
      for (let i = 0; i < batch.length; i++) {
        if (statuses[i] === 'claimed') {
          await client.query(ex.APPLY_INVOICE, [batch[i].messageId, batch[i].body, db.appliedBy]);
        }
      }
      const applied = statuses.includes('claimed');
      await ex.faultPoint('before-commit', db, applied);
      await client.query('COMMIT');
      await ex.faultPoint('after-commit', db, applied);
      statuses.forEach((s, i) => {
        if (s === 'mismatch') ex.log(`ALERT ${ids[i]}: IB002 payload mismatch, dead-lettered`);
      });
      return statuses.map((s) => OUTCOME[s]);
    } catch (e) {
      if (ex.isBug(e)) throw e;
      if (ex.Database.lost(e)) {
        ex.log(`database connection lost while processing a batch: ${e.message}`);
        db.forget();
        uncertain = true;
        await ex.backoff(attempt);
        continue;
      }
      await db.rollback();
      if (ex.RETRY_SQLSTATES.has(e.code)) {
        ex.log(`batch of ${ids.length}: ${e.code}, retrying the transaction`);
        await ex.backoff(attempt);
        continue;
      }
      if (e.code.startsWith('22') || e.code.startsWith('23')) {
        ex.log(`batch of ${ids.length}: ${e.code} ${e.message}, splitting it`);
        return null;
      }
      throw e;
    }
  }
  return ids.map(() => 'retry');
}

async function flush(db, channel, deliveries) {
  const batch = [];
  for (const msg of deliveries) {
    if (msg.properties.messageId) {
      batch.push({ msg, messageId: msg.properties.messageId, body: msg.content });
    } else {
      ex.log('a message without message_id, dead-lettered');
      ex.answerBroker(channel, msg, 'rejected');
    }
  }
  if (batch.length === 0) return;
  let outcomes = await processBatch(db, batch);
  if (outcomes === null) {
    // A bad message failed the batch: process them one by one, so that
    // only the bad one is dead-lettered.
    outcomes = [];
    for (const m of batch) outcomes.push(await claimAndApply(db, m.messageId, m.body));
  }
  batch.forEach((m, i) => ex.answerBroker(channel, m.msg, outcomes[i]));
}

async function main() {
  const db = new ex.Database('batch');
  // The broker hands out at most one batch of unacked messages at a time.
  const { connection, channel } = await ex.brokerChannel(BATCH_SIZE);
  let pending = [];
  let timer = null;
  let chain = Promise.resolve();
  // One batch at a time on the one connection: flushes are chained.
  const go = () => {
    clearTimeout(timer);
    timer = null;
    const deliveries = pending;
    pending = [];
    if (deliveries.length > 0) chain = chain.then(() => flush(db, channel, deliveries)).catch(ex.fatal);
  };
  const { consumerTag } = await channel.consume(ex.QUEUE, (msg) => {
    if (msg === null) return ex.fatal(new Error('the broker cancelled the consumer'));
    pending.push(msg);
    if (pending.length >= BATCH_SIZE) go();
    else if (timer === null) timer = setTimeout(go, BATCH_WAIT_MS);
  });
  ex.log(`consuming ${ex.QUEUE} into scope ${ex.SCOPE}, batches of up to ${BATCH_SIZE}`);
  ex.onStop(async () => {
    await channel.cancel(consumerTag);
    go();
    await chain;
    await connection.close();
    db.forget();
  });
}

main().catch(ex.fatal);
