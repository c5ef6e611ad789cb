// Db.java - what every consumer of this example shares: connecting, telling
// the errors apart, hashing the payload, and the uncertain-commit check.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Arrays;

final class Db {
    private Db() {}

    /** How often a transaction is retried on 40001, 40P01 or IB003 before the delivery is nacked. */
    static final int MAX_ATTEMPTS = 5;

    /**
     * Wait at most this long for another consumer's uncommitted claim of the
     * same message, then IB003 (retried) instead of blocking the consumer.
     * "0" would wait until that transaction ends.
     */
    static final String CLAIM_TIMEOUT = "2s";

    /**
     * A connection for one consumer, retried until the server answers: a
     * consumer that cannot reach its database has nothing better to do.  It
     * sets nothing on the session (see {@link #claimSettings}).  Autocommit
     * is off: the driver opens a transaction at the first statement, and
     * commit() or rollback() ends it.
     */
    static Connection connect(String url) throws InterruptedException {
        for (int attempt = 1; ; attempt++) {
            try {
                Connection c = DriverManager.getConnection(url);
                c.setAutoCommit(false);
                return c;
            } catch (SQLException e) {
                Log.event("reconnect-failed", e.getSQLState());
                Thread.sleep(Math.min(2000, 100L * attempt));
            }
        }
    }

    /**
     * The first statement of every transaction that claims: the settings of
     * its claims, local to it (SET LOCAL), so they end with its COMMIT or
     * ROLLBACK.  Nothing is set on the session, so this works the same behind
     * a transaction-mode pooler (PgBouncer's pool_mode = transaction), which
     * runs each transaction on whichever server session is free: a
     * session-level SET would reach only the transactions that happen to land
     * on that session, and stay behind for other clients.
     */
    static void claimSettings(Connection c) throws SQLException {
        try (Statement st = c.createStatement()) {
            st.execute("SET LOCAL inbox.claim_timeout = '" + CLAIM_TIMEOUT + "'");
        }
    }

    static void closeQuietly(Connection c) {
        try {
            if (c != null)
                c.close();
        } catch (SQLException ignored) {
            // the connection is gone either way
        }
    }

    static void rollbackQuietly(Connection c) {
        try {
            if (c != null && !c.isClosed())
                c.rollback();
        } catch (SQLException ignored) {
            // a lost connection rolled the transaction back already
        }
    }

    /** Roll back and run the whole transaction again: a concurrent transaction was in the way. */
    static boolean retryable(SQLException e) {
        String s = e.getSQLState();
        return "40001".equals(s)        // serialization failure
            || "40P01".equals(s)        // deadlock detected
            || "IB003".equals(s);       // claim in flight: another copy is being processed
    }

    /**
     * The connection is gone (class 08, or the server ended the session:
     * 57P01 is pg_terminate_backend or a shutdown).  If this happened during
     * COMMIT, nobody knows whether it committed: see Db.committed.
     */
    static boolean connectionLost(SQLException e, Connection c) {
        String s = e.getSQLState();
        if (s == null || s.startsWith("08") || s.startsWith("57P"))
            return true;
        try {
            return c.isClosed();
        } catch (SQLException ignored) {
            return true;
        }
    }

    /** The hash of the bytes as delivered: the same on every redelivery. */
    static byte[] sha256(String payload) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(payload.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);     // every JVM has SHA-256
        }
    }

    /**
     * Step 1 of the README's uncertain-commit procedure, on a fresh
     * connection: did the transaction that processed this message commit?
     * A row with our payload hash means yes: the claim committed, and with
     * it the effect.  No row, or a row with another hash (another copy of
     * the id won, so ours did not commit), means: process it again through
     * the normal path, whose claim waits for a transaction still in flight.
     */
    static boolean committed(Connection c, String scope, String messageId, byte[] hash) throws SQLException {
        try (PreparedStatement st = c.prepareStatement("SELECT payload_hash FROM inbox_status(?, ?)")) {
            st.setString(1, scope);
            st.setString(2, messageId);
            try (ResultSet rs = st.executeQuery()) {
                boolean yes = rs.next() && Arrays.equals(rs.getBytes(1), hash);
                c.commit();                 // end the read-only transaction
                return yes;
            }
        }
    }

    private static final long WORK_MS = Long.parseLong(System.getenv().getOrDefault("INBOX_WORK_MS", "0"));

    /**
     * Stands for the real work of an effect (INBOX_WORK_MS, default 0).  The
     * crash test sets it so that its faults often land inside a transaction.
     */
    static void simulateWork() {
        try {
            if (WORK_MS > 0)
                Thread.sleep(WORK_MS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Back off a little more after each failed attempt, with jitter so that colliding consumers part. */
    static void backoff(int attempt) throws InterruptedException {
        long base = 20L << Math.min(attempt, 6);
        Thread.sleep(base + (long) (Math.random() * base));
    }
}
