// DeferredWorker.java - deferred mode, second half: take pending messages
// with inbox_poll and a receipt each, apply the effect and complete by
// receipt in one transaction.
//
//   inbox_poll(scope, 10, lease, wait)          its own transaction
//   per message: BEGIN; effect; inbox_complete(scope, receipt); COMMIT
//   the effect failed: ROLLBACK; inbox_fail(scope, receipt, error, retry_after)
//
// The inbox, not the broker, now owns retries and dead letters: a message
// whose worker dies comes back when its lease runs out; after
// inbox.max_attempts takes it is dead (view inbox_dead_letters).  Receipts
// work from any connection, which is what a transaction-mode pooler needs.

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

final class DeferredWorker {
    private record Taken(String messageId, String payload, String receipt) {}

    private final String appUrl;
    private final String scope;
    private final double failRate;
    private Connection db;

    /** failRate: the share of effects that fail (a carrier API down, say), to show inbox_fail. */
    DeferredWorker(String appUrl, String scope, double failRate) {
        this.appUrl = appUrl;
        this.scope = scope;
        this.failRate = failRate;
    }

    void run() throws InterruptedException {
        db = Db.connect(appUrl);
        while (true) {
            List<Taken> taken;
            try {
                taken = poll();
            } catch (SQLException e) {
                Db.rollbackQuietly(db);
                if (Db.connectionLost(e, db)) {
                    // A poll that was cut off may have taken messages: they
                    // come back when their lease runs out.
                    Db.closeQuietly(db);
                    db = Db.connect(appUrl);
                } else {
                    Thread.sleep(200);
                }
                continue;
            }
            for (Taken t : taken)
                process(t);
        }
    }

    /** Up to 10 messages; waits up to 2 s for one to arrive (woken when a receive commits). */
    private List<Taken> poll() throws SQLException {
        List<Taken> out = new ArrayList<>();
        try (PreparedStatement st = db.prepareStatement("""
                SELECT message_id, payload::text, receipt::text
                  FROM inbox_poll(?, 10, lease => interval '5 seconds', wait => interval '2 seconds')""")) {
            st.setString(1, scope);
            try (ResultSet rs = st.executeQuery()) {
                while (rs.next())
                    out.add(new Taken(rs.getString(1), rs.getString(2), rs.getString(3)));
            }
        }
        db.commit();                        // the take is durable: its attempt counts
        return out;
    }

    private void process(Taken t) throws InterruptedException {
        for (int attempt = 1; ; attempt++) {
            try {
                // No Db.claimSettings: this transaction claims nothing, so it
                // needs no setting (inbox.claim_timeout bounds claims and
                // receives only).
                try (PreparedStatement effect = db.prepareStatement("""
                        INSERT INTO invoices (scope, message_id, amount, consumer)
                        VALUES (?, ?, (?::jsonb ->> 'amount')::numeric, 'deferred')""")) {
                    effect.setString(1, scope);
                    effect.setString(2, t.messageId());
                    effect.setString(3, t.payload());
                    effect.executeUpdate();
                }
                Db.simulateWork();
                if (ThreadLocalRandom.current().nextDouble() < failRate)
                    throw new EffectFailed("simulated: carrier API answered 503");
                try (PreparedStatement done = db.prepareStatement("SELECT inbox_complete(?, ?::uuid)")) {
                    done.setString(1, scope);
                    done.setString(2, t.receipt());
                    done.executeQuery().close();
                }
                db.commit();
                Log.event("applied", t.messageId());
                return;
            } catch (EffectFailed f) {
                // The effect's transaction rolls back, then the message goes
                // back to the inbox, to be taken again after retry_after.
                Db.rollbackQuietly(db);
                fail(t, f.getMessage());
                return;
            } catch (SQLException e) {
                if (Db.connectionLost(e, db)) {
                    // Uncertain commit: inbox_status tells.  'done' means the
                    // effect committed.  Anything else: leave it, the lease
                    // runs out and a worker takes it again; if the old
                    // transaction is still finishing, SKIP LOCKED keeps
                    // others off the message until it has.
                    Db.closeQuietly(db);
                    db = Db.connect(appUrl);
                    Log.event(isDone(t.messageId()) ? "uncertain-committed" : "uncertain-released", t.messageId());
                    return;
                }
                Db.rollbackQuietly(db);
                if ("IB004".equals(e.getSQLState())) {
                    // Our receipt no longer holds the message: the lease ran
                    // out and another worker took it.  Our effect rolled back.
                    Log.event("receipt-lost", t.messageId());
                    return;
                }
                if (Db.retryable(e) && attempt < Db.MAX_ATTEMPTS) {
                    Log.event("retry-" + e.getSQLState(), t.messageId());
                    Db.backoff(attempt);
                    continue;
                }
                fail(t, e.getSQLState() + ": " + e.getMessage());
                return;
            }
        }
    }

    private void fail(Taken t, String error) {
        try (PreparedStatement st = db.prepareStatement(
                "SELECT inbox_fail(?, ?::uuid, ?, retry_after => interval '200 ms')")) {
            st.setString(1, scope);
            st.setString(2, t.receipt());
            st.setString(3, error);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                Log.event("failed-" + rs.getString(1), t.messageId());    // pending again, or dead
            }
            db.commit();
        } catch (SQLException e) {
            // IB004 or a lost connection: the lease brings it back anyway.
            Db.rollbackQuietly(db);
            Log.event("fail-not-recorded", t.messageId());
        }
    }

    private boolean isDone(String messageId) {
        try (PreparedStatement st = db.prepareStatement("SELECT state FROM inbox_status(?, ?)")) {
            st.setString(1, scope);
            st.setString(2, messageId);
            try (ResultSet rs = st.executeQuery()) {
                boolean done = rs.next() && "done".equals(rs.getString(1));
                db.commit();
                return done;
            }
        } catch (SQLException e) {
            Db.rollbackQuietly(db);
            return false;                   // unknown: the lease settles it
        }
    }

    private static final class EffectFailed extends Exception {
        private static final long serialVersionUID = 1L;

        EffectFailed(String message) {
            super(message);
        }
    }
}
