#!/usr/bin/env node
// Publish sample invoices to QUEUE, the way an at-least-once producer does.
//
//   node publish.js --count 100 --duplicates 0.3   100 invoices, 30% sent twice
//   node publish.js --ids 5,7 --conflict            ids 5 and 7 again, with other content
//   node publish.js --poison                        one invoice that can never apply
//
// Each message carries its id in the AMQP message_id property and a JSON
// invoice as its body; the same id always gets byte-for-byte the same body,
// unless --conflict is given (the same bodies as publish.py's).  Messages
// are persistent and the broker confirms each publish.
'use strict';

const { parseArgs } = require('node:util');
const amqp = require('amqplib');
const ex = require('./inbox-example');

const { values: args } = parseArgs({
  options: {
    prefix: { type: 'string', default: 'inv-' },
    count: { type: 'string', default: '0' },
    ids: { type: 'string', default: '' },
    duplicates: { type: 'string', default: '0' },
    conflict: { type: 'boolean', default: false },
    poison: { type: 'boolean', default: false },
  },
});

// The JSON written out, so that it is byte for byte publish.py's
function body(n, conflict) {
  const amount = conflict ? '999999.99' : `${n % 1000}.${String(n % 100).padStart(2, '0')}`;
  const number = `INV-${String(n).padStart(6, '0')}`;
  return Buffer.from(`{"amount": "${amount}", "customer": "customer-${n % 7}", "number": "${number}"}`);
}

async function main() {
  const numbers = [];
  for (let n = 1; n <= Number(args.count); n++) numbers.push(n);
  for (const n of args.ids.split(',').filter(Boolean)) numbers.push(Number(n));
  let messages = numbers.map((n) => [`${args.prefix}${String(n).padStart(6, '0')}`, body(n, args.conflict)]);
  messages = messages.concat(messages.filter(() => Math.random() < Number(args.duplicates)));
  for (let i = messages.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [messages[i], messages[j]] = [messages[j], messages[i]];
  }
  if (args.poison) {
    messages.push([`${args.prefix}poison`, Buffer.from('{"amount": "-1", "customer": "nobody", "number": "INV-POISON"}')]);
  }

  const connection = await amqp.connect(ex.AMQP_URL);
  const channel = await connection.createConfirmChannel();
  await ex.declareQueues(channel);
  for (const [messageId, payload] of messages) {
    channel.sendToQueue(ex.QUEUE, payload, { messageId, persistent: true, contentType: 'application/json' });
  }
  await channel.waitForConfirms();
  await connection.close();
  console.log(`published ${messages.length} messages to ${ex.QUEUE}`);
}

main().catch(ex.fatal);
