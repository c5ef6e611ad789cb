#!/usr/bin/env node
// Claim mode: one transaction per delivery, then the ack.
//
// For each message of QUEUE: BEGIN; inbox_claim(SCOPE, message_id, sha256 of
// the body); if it is the first claim, INSERT the invoice; COMMIT; then ack.
// A redelivery finds the committed claim and is acked without a second
// invoice.  See README.md beside this file.
'use strict';

const ex = require('./inbox-example');

// The claim and the effect, in the one transaction deliver() commits.
function claimAndApply(db, messageId, body) {
  const digest = ex.sha256(body);
  return ex.deliver(db, messageId, digest, async (client) => {
    const { rows } = await client.query('SELECT inbox_claim($1, $2, $3) AS fresh', [ex.SCOPE, messageId, digest]);
    if (rows[0].fresh) await client.query(ex.APPLY_INVOICE, [messageId, body, db.appliedBy]);
    return rows[0].fresh;
  });
}

function outcomeOf(db, msg) {
  if (!msg.properties.messageId) {
    // Without an id that stays the same on redelivery there is nothing to
    // deduplicate on.
    ex.log('a message without message_id, dead-lettered');
    return 'rejected';
  }
  return claimAndApply(db, msg.properties.messageId, msg.content);
}

async function main() {
  const db = new ex.Database('claim');
  const { connection, channel } = await ex.brokerChannel(10);
  // amqplib calls the callback for each delivery without waiting for the
  // last one to finish: chain them, so that one transaction runs at a time
  // on the one connection.
  let chain = Promise.resolve();
  const { consumerTag } = await channel.consume(ex.QUEUE, (msg) => {
    if (msg === null) return ex.fatal(new Error('the broker cancelled the consumer'));
    chain = chain
      .then(async () => ex.answerBroker(channel, msg, await outcomeOf(db, msg)))
      .catch(ex.fatal);
  });
  ex.log(`consuming ${ex.QUEUE} into scope ${ex.SCOPE}`);
  ex.onStop(async () => {
    // Messages delivered but not processed go back to the queue.
    await channel.cancel(consumerTag);
    await chain;
    await connection.close();
    db.forget();
  });
}

if (require.main === module) main().catch(ex.fatal);

module.exports = { claimAndApply };
