// Broker.java - a stand-in for your broker client (Kafka, RabbitMQ, SQS...).
//
// Replace this class with your real client.  It exists so that the example
// runs anywhere, and it behaves as an at-least-once broker does:
//
//   - fetch() hands out a delivery and hides it for a visibility timeout;
//     a delivery that is not acked in time is delivered again (a consumer
//     that died, a slow one, a lost ack);
//   - ack() can be lost: with probability loseAcks it does nothing, as when
//     the ack never reaches the broker;
//   - deadLetter() moves a delivery aside for a human to look at.
//
// It keeps its queue in a table of a database of its own, reached over its
// own connection, so an ack can never be part of the consumer's database
// transaction: exactly the situation of a real broker.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

final class Broker implements AutoCloseable {
    /** One delivery of one message.  seq names the delivery, not the message. */
    record Delivery(long seq, String messageId, String payload, int deliveries) {}

    private final String url;
    private final String topic;
    private final double loseAcks;
    private final int visibilitySeconds;
    private Connection conn;

    Broker(String url, String topic, double loseAcks, int visibilitySeconds) {
        this.url = url;
        this.topic = topic;
        this.loseAcks = loseAcks;
        this.visibilitySeconds = visibilitySeconds;
    }

    private Connection conn() throws SQLException {
        if (conn == null || conn.isClosed()) {
            conn = DriverManager.getConnection(url);
            conn.setAutoCommit(true);       // every broker call stands alone
        }
        return conn;
    }

    /** Up to max deliveries, oldest first; an empty list when nothing is due. */
    List<Delivery> fetch(int max) throws SQLException {
        String sql = """
            UPDATE queue SET visible_at = now() + make_interval(secs => ?),
                             deliveries = deliveries + 1
             WHERE seq IN (SELECT seq FROM queue
                            WHERE topic = ? AND state = 'ready' AND visible_at <= now()
                            ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED)
            RETURNING seq, message_id, payload, deliveries""";
        List<Delivery> out = new ArrayList<>();
        try (PreparedStatement st = conn().prepareStatement(sql)) {
            st.setInt(1, visibilitySeconds);
            st.setString(2, topic);
            st.setInt(3, max);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next())
                    out.add(new Delivery(rs.getLong(1), rs.getString(2), rs.getString(3), rs.getInt(4)));
            }
        } catch (SQLException e) {
            close();                        // reconnect on the next call
            throw e;
        }
        out.sort((a, b) -> Long.compare(a.seq(), b.seq()));
        return out;
    }

    /** Done with this delivery.  Sometimes lost, as acks are. */
    void ack(Delivery d) {
        if (ThreadLocalRandom.current().nextDouble() < loseAcks)
            return;
        settle(d, "UPDATE queue SET state = 'acked' WHERE seq = ? AND state = 'ready'", null);
    }

    /** Deliver again soon (after retries ran out). */
    void nack(Delivery d) {
        settle(d, "UPDATE queue SET visible_at = now() + interval '200 ms' WHERE seq = ? AND state = 'ready'", null);
    }

    /** Never to be processed: park it for a human. */
    void deadLetter(Delivery d, String reason) {
        settle(d, "UPDATE queue SET state = 'dead', dead_reason = ? WHERE seq = ? AND state = 'ready'", reason);
    }

    // A settle that fails is like a lost ack: the delivery comes back after
    // its visibility timeout, and the inbox makes the redelivery harmless.
    private void settle(Delivery d, String sql, String reason) {
        try (PreparedStatement st = conn().prepareStatement(sql)) {
            int i = 1;
            if (reason != null)
                st.setString(i++, reason);
            st.setLong(i, d.seq());
            st.executeUpdate();
        } catch (SQLException e) {
            close();
        }
    }

    @Override
    public void close() {
        try {
            if (conn != null)
                conn.close();
        } catch (SQLException ignored) {
            // nothing to do: the connection is gone either way
        }
        conn = null;
    }
}
