// db.go - what every consumer of this example shares: connecting, telling
// the errors apart, hashing the payload, and the uncertain-commit check.

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// maxAttempts: how often a transaction is retried on 40001, 40P01 or IB003
// before the delivery is nacked.
const maxAttempts = 5

// claimTimeout: wait at most this long for another consumer's uncommitted
// claim of the same message, then IB003 (retried) instead of blocking the
// consumer.  "0" would wait until that transaction ends.
const claimTimeout = "2s"

// connect returns a connection for one consumer, retried until the server
// answers: a consumer that cannot reach its database has nothing better to do.
// It sets nothing on the session: see begin.
func connect(ctx context.Context, url string) *pgx.Conn {
	for attempt := 1; ; attempt++ {
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			return c
		}
		logEvent("reconnect-failed", sqlState(err))
		time.Sleep(time.Duration(min(2000, 100*attempt)) * time.Millisecond)
	}
}

// begin opens a transaction that claims, with its settings local to it
// (set_config(..., true) is SET LOCAL): they end with its COMMIT or
// ROLLBACK.  Nothing is set on the session, so this works the same behind a
// transaction-mode pooler (PgBouncer's pool_mode = transaction), which runs
// each transaction on whichever server session is free: a session-level SET
// would reach only the transactions that happen to land on that session,
// and stay behind for other clients.
func begin(ctx context.Context, c *pgx.Conn) (pgx.Tx, error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('inbox.claim_timeout', $1, true)", claimTimeout); err != nil {
		tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// sqlState is the error's SQLSTATE, or "" when the server sent none (an
// I/O error, a closed connection).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// retryable: roll back and run the whole transaction again, a concurrent
// transaction was in the way.
func retryable(err error) bool {
	switch sqlState(err) {
	case "40001", // serialization failure
		"40P01", // deadlock detected
		"IB003": // claim in flight: another copy is being processed
		return true
	}
	return false
}

// connectionLost: the connection is gone (no SQLSTATE at all, class 08, or
// the server ended the session: 57P01 is pg_terminate_backend or a
// shutdown).  If this happened during COMMIT, nobody knows whether it
// committed: see committed.
func connectionLost(err error, c *pgx.Conn) bool {
	s := sqlState(err)
	return s == "" || strings.HasPrefix(s, "08") || strings.HasPrefix(s, "57P") || c.IsClosed()
}

// hash of the bytes as delivered: the same on every redelivery.
func hash(payload string) []byte {
	h := sha256.Sum256([]byte(payload))
	return h[:]
}

// committed is step 1 of the README's uncertain-commit procedure, on a
// fresh connection: did the transaction that processed this message
// commit?  A row with our payload hash means yes: the claim committed, and
// with it the effect.  No row, or a row with another hash (another copy of
// the id won, so ours did not commit), means: process it again through the
// normal path, whose claim waits for a transaction still in flight.
func committed(ctx context.Context, c *pgx.Conn, scope, messageID string, h []byte) (bool, error) {
	var stored []byte
	err := c.QueryRow(ctx, "SELECT payload_hash FROM inbox_status($1, $2)", scope, messageID).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return bytes.Equal(stored, h), nil
}

var workTime = func() time.Duration {
	ms, _ := strconv.Atoi(os.Getenv("INBOX_WORK_MS"))
	return time.Duration(ms) * time.Millisecond
}()

// simulateWork stands for the real work of an effect (INBOX_WORK_MS,
// default 0).  The crash test sets it so that its faults often land inside
// a transaction.
func simulateWork() {
	time.Sleep(workTime)
}

// backoff a little more after each failed attempt, with jitter so that
// colliding consumers part.
func backoff(attempt int) {
	if attempt > 6 {
		attempt = 6
	}
	base := 20 * (1 << attempt)
	time.Sleep(time.Duration(base+rand.Intn(base)) * time.Millisecond)
}

// logEvent writes one line per event on stdout: what a real consumer would
// log or count.  The crash test reads these lines to report what happened.
func logEvent(what, detail string) {
	fmt.Printf("%s %s\n", what, detail)
}
