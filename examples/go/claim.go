// claim.go - process now: claim and effect in one transaction, commit,
// then ack.
//
//	delivery -> BEGIN; inbox_claim(...); INSERT the effect; COMMIT -> ack
//
// A crash anywhere before COMMIT leaves neither claim nor effect, and the
// broker delivers the message again.  A crash after COMMIT but before the
// ack leaves both, and the redelivery's claim returns false: it is acked
// without a second effect.
//
// With a notice topic (mode "forward"), the same transaction also sends a
// notice through the outbox (outbox_send): it leaves only if the claim and
// the effect commit, and inbox-relay delivers it after the commit, under
// the outbox id, in commit order per key.

package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v4"
)

type ClaimConsumer struct {
	appURL      string
	scope       string
	broker      *Broker
	db          *pgx.Conn
	noticeTopic string // "": no notice
}

func (c *ClaimConsumer) Run(ctx context.Context) {
	c.db = connect(ctx, c.appURL)
	for {
		ds, err := c.broker.Fetch(ctx, 1)
		if err != nil {
			time.Sleep(200 * time.Millisecond) // broker unreachable: try again
			continue
		}
		if len(ds) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.handle(ctx, ds[0])
	}
}

func (c *ClaimConsumer) handle(ctx context.Context, d Delivery) {
	h := hash(d.Payload)
	for attempt := 1; ; attempt++ {
		fresh, err := c.claimAndApply(ctx, d, h) // commits
		if err == nil {
			if fresh {
				logEvent("applied", d.MessageID)
			} else {
				logEvent("duplicate", d.MessageID)
			}
			c.broker.Ack(ctx, d) // only after COMMIT returned
			return
		}
		if connectionLost(err, c.db) {
			// Uncertain commit: follow the README.  Reconnect; a row with
			// our hash means it committed: ack.  Otherwise go round the
			// loop, through the normal path again.
			c.db.Close(ctx)
			c.db = connect(ctx, c.appURL)
			done, err := committed(ctx, c.db, c.scope, d.MessageID, h)
			if err == nil && done {
				logEvent("uncertain-committed", d.MessageID)
				c.broker.Ack(ctx, d)
				return
			}
			if err == nil {
				logEvent("uncertain-reprocess", d.MessageID)
			}
			continue // lost again, or not committed: the normal path
		}
		switch {
		case sqlState(err) == "IB002":
			// Same id, different content: the producer reused an id.
			// Never apply it, never ack it as processed.
			logEvent("dead-lettered", d.MessageID)
			c.broker.DeadLetter(ctx, d, err.Error())
			return
		case retryable(err) && attempt < maxAttempts:
			logEvent("retry-"+sqlState(err), d.MessageID)
			backoff(attempt)
		default:
			// Retries ran out, or an error we do not know: let the broker
			// deliver it again later.
			logEvent("nacked-"+sqlState(err), d.MessageID)
			c.broker.Nack(ctx, d)
			return
		}
	}
}

// claimAndApply runs the claim and the effect in one transaction; true if
// the effect was applied.  Any error leaves the transaction rolled back.
func (c *ClaimConsumer) claimAndApply(ctx context.Context, d Delivery, h []byte) (bool, error) {
	tx, err := begin(ctx, c.db) // BEGIN, and the claim timeout for this transaction
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) // a no-op once committed

	var fresh bool
	if err := tx.QueryRow(ctx, "SELECT inbox_claim($1, $2, $3)", c.scope, d.MessageID, h).Scan(&fresh); err != nil {
		return false, err
	}
	if fresh {
		// The business effect.  Everything written here commits or rolls
		// back with the claim.
		if _, err := tx.Exec(ctx, `
			INSERT INTO invoices (scope, message_id, amount, consumer)
			VALUES ($1, $2, ($3::jsonb ->> 'amount')::numeric, 'claim')`,
			c.scope, d.MessageID, d.Payload); err != nil {
			return false, err
		}
		if c.noticeTopic != "" {
			// The notice, keyed by customer when the invoice names one:
			// one customer's notices arrive in the order they committed.
			if _, err := tx.Exec(ctx, `
				SELECT outbox_send($1, coalesce($2::jsonb ->> 'customer', $3),
				                   jsonb_build_object('source', $4::text, 'amount', $2::jsonb -> 'amount'))`,
				c.noticeTopic, d.Payload, c.scope, d.MessageID); err != nil {
				return false, err
			}
		}
		simulateWork()
	}
	return fresh, tx.Commit(ctx)
}
