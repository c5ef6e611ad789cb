// batch.go - a whole batch of deliveries in one transaction, with one
// inbox_claim_many call: the shape of a Kafka consumer that commits its
// offsets after each poll.
//
//	BEGIN; inbox_claim_many(scope, ids, hashes, on_mismatch => 'return');
//	INSERT the effects of the rows 'claimed'; COMMIT
//	-> ack 'claimed' and 'duplicate', dead-letter 'mismatch'
//
// on_mismatch => 'return' reports a reused id as a row instead of raising
// IB002 for the whole batch, so one bad message does not hold up the rest.

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v4"
)

const batchSize = 20

type BatchConsumer struct {
	appURL string
	scope  string
	broker *Broker
	db     *pgx.Conn
}

func (c *BatchConsumer) Run(ctx context.Context) {
	c.db = connect(ctx, c.appURL)
	for {
		batch, err := c.broker.Fetch(ctx, batchSize)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if len(batch) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.handle(ctx, batch)
	}
}

func (c *BatchConsumer) handle(ctx context.Context, batch []Delivery) {
	for attempt := 1; ; attempt++ {
		status, err := c.claimAndApply(ctx, batch) // commits
		if err == nil {
			for i, d := range batch {
				switch status[i] {
				case "claimed":
					logEvent("applied", d.MessageID)
					c.broker.Ack(ctx, d)
				case "duplicate":
					logEvent("duplicate", d.MessageID)
					c.broker.Ack(ctx, d)
				default: // "mismatch": never applied
					logEvent("dead-lettered", d.MessageID)
					c.broker.DeadLetter(ctx, d, "payload mismatch (IB002)")
				}
			}
			return
		}
		if connectionLost(err, c.db) {
			// Uncertain commit, per message as the README says: ack what
			// committed, run the rest through the normal path.
			c.db.Close(ctx)
			c.db = connect(ctx, c.appURL)
			var rest []Delivery
			lostAgain := false
			for _, d := range batch {
				done, err := committed(ctx, c.db, c.scope, d.MessageID, hash(d.Payload))
				if err != nil {
					lostAgain = true
					break
				}
				if done {
					logEvent("uncertain-committed", d.MessageID)
					c.broker.Ack(ctx, d)
				} else {
					rest = append(rest, d)
				}
			}
			if lostAgain {
				continue // start over with the same batch
			}
			if len(rest) == 0 {
				return
			}
			logEvent("uncertain-reprocess", fmt.Sprintf("%d messages", len(rest)))
			batch = rest
			continue
		}
		if retryable(err) && attempt < maxAttempts {
			logEvent("retry-"+sqlState(err), fmt.Sprintf("%d messages", len(batch)))
			backoff(attempt)
			continue
		}
		logEvent("nacked-"+sqlState(err), fmt.Sprintf("%d messages", len(batch)))
		for _, d := range batch {
			c.broker.Nack(ctx, d)
		}
		return
	}
}

// claimAndApply claims the batch and applies the effects of the new
// messages in one transaction; it returns each delivery's status.
func (c *BatchConsumer) claimAndApply(ctx context.Context, batch []Delivery) ([]string, error) {
	ids := make([]string, len(batch))
	hashes := make([][]byte, len(batch))
	for i, d := range batch {
		ids[i] = d.MessageID
		hashes[i] = hash(d.Payload)
	}

	tx, err := begin(ctx, c.db) // BEGIN, and the claim timeout for this transaction
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) // a no-op once committed

	status := make([]string, len(batch))
	rows, err := tx.Query(ctx,
		"SELECT ordinality, status FROM inbox_claim_many($1, $2, $3, on_mismatch => 'return')",
		c.scope, ids, hashes)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var ord int32
		var s string
		if err := rows.Scan(&ord, &s); err != nil {
			rows.Close()
			return nil, err
		}
		status[ord-1] = s // ordinality counts from 1
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	for i, d := range batch {
		if status[i] != "claimed" {
			continue // a duplicate or a mismatch: no effect
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO invoices (scope, message_id, amount, consumer)
			VALUES ($1, $2, ($3::jsonb ->> 'amount')::numeric, 'batch')`,
			c.scope, d.MessageID, d.Payload); err != nil {
			return nil, err
		}
	}
	simulateWork()
	return status, tx.Commit(ctx)
}
