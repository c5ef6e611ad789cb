// broker.go - a stand-in for your broker client (Kafka, RabbitMQ, SQS...).
//
// Replace this file with your real client.  It exists so that the example
// runs anywhere, and it behaves as an at-least-once broker does:
//
//   - Fetch hands out deliveries and hides each for a visibility timeout;
//     a delivery that is not acked in time is delivered again (a consumer
//     that died, a slow one, a lost ack);
//   - Ack can be lost: with probability loseAcks it does nothing, as when
//     the ack never reaches the broker;
//   - DeadLetter moves a delivery aside for a human to look at.
//
// It keeps its queue in a table of a database of its own, reached over its
// own connection, so an ack can never be part of the consumer's database
// transaction: exactly the situation of a real broker.

package main

import (
	"context"
	"math/rand"
	"sort"

	"github.com/jackc/pgx/v4"
)

// Delivery is one delivery of one message.  Seq names the delivery, not
// the message: a redelivery of the same row, or another copy the producer
// sent, may carry the same MessageID.
type Delivery struct {
	Seq       int64
	MessageID string
	Payload   string
}

type Broker struct {
	url               string
	topic             string
	loseAcks          float64
	visibilitySeconds int
	conn              *pgx.Conn
}

func (b *Broker) db(ctx context.Context) (*pgx.Conn, error) {
	if b.conn == nil || b.conn.IsClosed() {
		c, err := pgx.Connect(ctx, b.url)
		if err != nil {
			return nil, err
		}
		b.conn = c
	}
	return b.conn, nil
}

// Fetch returns up to max deliveries, oldest first; none when nothing is due.
func (b *Broker) Fetch(ctx context.Context, max int) ([]Delivery, error) {
	c, err := b.db(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, `
		UPDATE queue SET visible_at = now() + make_interval(secs => $1),
		                 deliveries = deliveries + 1
		 WHERE seq IN (SELECT seq FROM queue
		                WHERE topic = $2 AND state = 'ready' AND visible_at <= now()
		                ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING seq, message_id, payload`, b.visibilitySeconds, b.topic, max)
	if err != nil {
		b.Close()
		return nil, err
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		if err := rows.Scan(&d.Seq, &d.MessageID, &d.Payload); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		b.Close()
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// Ack: done with this delivery.  Sometimes lost, as acks are.
func (b *Broker) Ack(ctx context.Context, d Delivery) {
	if rand.Float64() < b.loseAcks {
		return
	}
	b.settle(ctx, `UPDATE queue SET state = 'acked' WHERE seq = $1 AND state = 'ready'`, d.Seq)
}

// Nack: deliver again soon (after retries ran out).
func (b *Broker) Nack(ctx context.Context, d Delivery) {
	b.settle(ctx, `UPDATE queue SET visible_at = now() + interval '200 ms' WHERE seq = $1 AND state = 'ready'`, d.Seq)
}

// DeadLetter: never to be processed; park it for a human.
func (b *Broker) DeadLetter(ctx context.Context, d Delivery, reason string) {
	b.settle(ctx, `UPDATE queue SET state = 'dead', dead_reason = $2 WHERE seq = $1 AND state = 'ready'`, d.Seq, reason)
}

// A settle that fails is like a lost ack: the delivery comes back after its
// visibility timeout, and the inbox makes the redelivery harmless.
func (b *Broker) settle(ctx context.Context, sql string, args ...interface{}) {
	c, err := b.db(ctx)
	if err != nil {
		return
	}
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		b.Close()
	}
}

func (b *Broker) Close() {
	if b.conn != nil {
		b.conn.Close(context.Background())
		b.conn = nil
	}
}
