// deferred.go - deferred mode: receive now, process later.
//
// The receiver stores each delivery in the inbox as pending, then acks the
// broker at once:
//
//	delivery -> inbox_receive(scope, id, payload, hash) -> ack
//
// The worker takes pending messages with inbox_poll and a receipt each,
// and applies the effect and completes by receipt in one transaction:
//
//	inbox_poll(scope, 10, lease, wait)          its own transaction
//	per message: BEGIN; effect; inbox_complete(scope, receipt); COMMIT
//	the effect failed: ROLLBACK; inbox_fail(scope, receipt, error, retry_after)
//
// The inbox, not the broker, now owns retries and dead letters: a message
// whose worker dies comes back when its lease runs out; after
// inbox.max_attempts takes it is dead (view inbox_dead_letters).  Receipts
// work from any connection, which is what a transaction-mode pooler needs.

package main

import (
	"context"
	"errors"
	"math/rand"
	"time"

	"github.com/jackc/pgx/v4"
)

type DeferredReceiver struct {
	appURL string
	scope  string
	broker *Broker
	db     *pgx.Conn
}

func (r *DeferredReceiver) Run(ctx context.Context) {
	r.db = connect(ctx, r.appURL)
	for {
		ds, err := r.broker.Fetch(ctx, 1)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if len(ds) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		r.handle(ctx, ds[0])
	}
}

func (r *DeferredReceiver) handle(ctx context.Context, d Delivery) {
	h := hash(d.Payload)
	for attempt := 1; ; attempt++ {
		fresh, err := r.receive(ctx, d, h) // commits
		if err == nil {
			if fresh {
				logEvent("received", d.MessageID)
			} else {
				logEvent("duplicate", d.MessageID)
			}
			r.broker.Ack(ctx, d)
			return
		}
		if connectionLost(err, r.db) {
			// The same uncertain-commit procedure as a claim.
			r.db.Close(ctx)
			r.db = connect(ctx, r.appURL)
			done, err := committed(ctx, r.db, r.scope, d.MessageID, h)
			if err == nil && done {
				logEvent("uncertain-committed", d.MessageID)
				r.broker.Ack(ctx, d)
				return
			}
			if err == nil {
				logEvent("uncertain-reprocess", d.MessageID)
			}
			continue
		}
		switch {
		case sqlState(err) == "IB002":
			logEvent("dead-lettered", d.MessageID)
			r.broker.DeadLetter(ctx, d, err.Error())
			return
		case retryable(err) && attempt < maxAttempts:
			logEvent("retry-"+sqlState(err), d.MessageID)
			backoff(attempt)
		default:
			logEvent("nacked-"+sqlState(err), d.MessageID)
			r.broker.Nack(ctx, d)
			return
		}
	}
}

// receive stores the delivery as pending, in a short transaction of its
// own.  The receive claims the message id: it runs under the claim timeout
// that begin sets for this transaction.
func (r *DeferredReceiver) receive(ctx context.Context, d Delivery, h []byte) (bool, error) {
	tx, err := begin(ctx, r.db)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) // a no-op once committed

	var fresh bool
	if err := tx.QueryRow(ctx, "SELECT inbox_receive($1, $2, $3::jsonb, $4)",
		r.scope, d.MessageID, d.Payload, h).Scan(&fresh); err != nil {
		return false, err
	}
	return fresh, tx.Commit(ctx)
}

type DeferredWorker struct {
	appURL   string
	scope    string
	failRate float64 // the share of effects that fail (a carrier API down, say), to show inbox_fail
	db       *pgx.Conn
}

type taken struct {
	messageID, payload, receipt string
}

// errEffectFailed stands for the business work failing.
var errEffectFailed = errors.New("simulated: carrier API answered 503")

func (w *DeferredWorker) Run(ctx context.Context) {
	w.db = connect(ctx, w.appURL)
	for {
		msgs, err := w.poll(ctx)
		if err != nil {
			if connectionLost(err, w.db) {
				// A poll that was cut off may have taken messages: they
				// come back when their lease runs out.
				w.db.Close(ctx)
				w.db = connect(ctx, w.appURL)
			} else {
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		for _, t := range msgs {
			w.process(ctx, t)
		}
	}
}

// poll takes up to 10 messages; it waits up to 2 s for one to arrive
// (woken when a receive commits).  Its own transaction: the take is
// durable, and its attempt counts.
func (w *DeferredWorker) poll(ctx context.Context) ([]taken, error) {
	rows, err := w.db.Query(ctx, `
		SELECT message_id, payload::text, receipt::text
		  FROM inbox_poll($1, 10, lease => interval '5 seconds', wait => interval '2 seconds')`, w.scope)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []taken
	for rows.Next() {
		var t taken
		if err := rows.Scan(&t.messageID, &t.payload, &t.receipt); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func (w *DeferredWorker) process(ctx context.Context, t taken) {
	for attempt := 1; ; attempt++ {
		err := w.applyAndComplete(ctx, t) // commits
		if err == nil {
			logEvent("applied", t.messageID)
			return
		}
		switch {
		case errors.Is(err, errEffectFailed):
			// The effect's transaction rolled back; the message goes back
			// to the inbox, to be taken again after retry_after.
			w.fail(ctx, t, err.Error())
			return
		case connectionLost(err, w.db):
			// Uncertain commit: inbox_status tells.  'done' means the
			// effect committed.  Anything else: leave it, the lease runs
			// out and a worker takes it again; if the old transaction is
			// still finishing, SKIP LOCKED keeps others off the message
			// until it has.
			w.db.Close(ctx)
			w.db = connect(ctx, w.appURL)
			var state string
			if w.db.QueryRow(ctx, "SELECT state FROM inbox_status($1, $2)", w.scope, t.messageID).Scan(&state) == nil &&
				state == "done" {
				logEvent("uncertain-committed", t.messageID)
			} else {
				logEvent("uncertain-released", t.messageID)
			}
			return
		case sqlState(err) == "IB004":
			// Our receipt no longer holds the message: the lease ran out
			// and another worker took it.  Our effect rolled back.
			logEvent("receipt-lost", t.messageID)
			return
		case retryable(err) && attempt < maxAttempts:
			logEvent("retry-"+sqlState(err), t.messageID)
			backoff(attempt)
		default:
			w.fail(ctx, t, err.Error())
			return
		}
	}
}

// applyAndComplete applies the effect and completes the message by its
// receipt, in one transaction.  Any error leaves it rolled back.
func (w *DeferredWorker) applyAndComplete(ctx context.Context, t taken) error {
	// A plain Begin: this transaction claims nothing, so it needs no
	// setting (inbox.claim_timeout bounds claims and receives only).
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op once committed

	if _, err := tx.Exec(ctx, `
		INSERT INTO invoices (scope, message_id, amount, consumer)
		VALUES ($1, $2, ($3::jsonb ->> 'amount')::numeric, 'deferred')`,
		w.scope, t.messageID, t.payload); err != nil {
		return err
	}
	simulateWork()
	if rand.Float64() < w.failRate {
		return errEffectFailed // the INSERT above rolls back with the transaction
	}
	if _, err := tx.Exec(ctx, "SELECT inbox_complete($1, $2::uuid)", w.scope, t.receipt); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (w *DeferredWorker) fail(ctx context.Context, t taken, reason string) {
	var state string
	err := w.db.QueryRow(ctx, "SELECT inbox_fail($1, $2::uuid, $3, retry_after => interval '200 ms')",
		w.scope, t.receipt, reason).Scan(&state)
	if err != nil {
		// IB004 or a lost connection: the lease brings it back anyway.
		logEvent("fail-not-recorded", t.messageID)
		return
	}
	logEvent("failed-"+state, t.messageID) // pending again, or dead
}
