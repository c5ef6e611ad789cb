#!/usr/bin/env node
// Deferred mode, the receiving half: store each message, then ack.
//
// inbox_receive stores the message as pending in its own short transaction;
// the broker is acked after that COMMIT.  worker.js applies the effect later.
// A redelivery is a duplicate in every state of the stored message, so it is
// acked and stored only once.
'use strict';

const ex = require('./inbox-example');

function receive(db, messageId, body) {
  const digest = ex.sha256(body);
  return ex.deliver(db, messageId, digest, async (client) => {
    // The hash is the one the claim mode uses: of the bytes delivered.
    const { rows } = await client.query(
      "SELECT inbox_receive($1, $2, convert_from($3::bytea, 'UTF8')::jsonb, $4) AS fresh",
      [ex.SCOPE, messageId, body, digest]);
    return rows[0].fresh;
  });
}

async function main() {
  const db = new ex.Database('receiver');
  const { connection, channel } = await ex.brokerChannel(10);
  let chain = Promise.resolve();
  const { consumerTag } = await channel.consume(ex.QUEUE, (msg) => {
    if (msg === null) return ex.fatal(new Error('the broker cancelled the consumer'));
    chain = chain
      .then(async () => {
        let outcome = 'rejected';
        if (msg.properties.messageId) outcome = await receive(db, msg.properties.messageId, msg.content);
        else ex.log('a message without message_id, dead-lettered');
        ex.answerBroker(channel, msg, outcome);
      })
      .catch(ex.fatal);
  });
  ex.log(`receiving ${ex.QUEUE} into scope ${ex.SCOPE}`);
  ex.onStop(async () => {
    await channel.cancel(consumerTag);
    await chain;
    await connection.close();
    db.forget();
  });
}

main().catch(ex.fatal);
