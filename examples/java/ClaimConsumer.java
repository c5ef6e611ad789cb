// ClaimConsumer.java - process now: claim and effect in one transaction,
// commit, then ack.
//
//   delivery -> BEGIN; inbox_claim(...); INSERT the effect; COMMIT -> ack
//
// A crash anywhere before COMMIT leaves neither claim nor effect, and the
// broker delivers the message again.  A crash after COMMIT but before the
// ack leaves both, and the redelivery's claim returns false: it is acked
// without a second effect.

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.List;

final class ClaimConsumer {
    private final String appUrl;
    private final String scope;
    private final Broker broker;
    private Connection db;

    ClaimConsumer(String appUrl, String scope, Broker broker) {
        this.appUrl = appUrl;
        this.scope = scope;
        this.broker = broker;
    }

    void run() throws InterruptedException {
        db = Db.connect(appUrl);
        while (true) {
            List<Broker.Delivery> ds;
            try {
                ds = broker.fetch(1);
            } catch (SQLException e) {
                Thread.sleep(200);          // broker unreachable: try again
                continue;
            }
            if (ds.isEmpty()) {
                Thread.sleep(100);
                continue;
            }
            handle(ds.get(0));
        }
    }

    private void handle(Broker.Delivery d) throws InterruptedException {
        byte[] hash = Db.sha256(d.payload());
        for (int attempt = 1; ; attempt++) {
            try {
                boolean fresh = claimAndApply(d, hash);     // commits
                Log.event(fresh ? "applied" : "duplicate", d.messageId());
                broker.ack(d);              // only after COMMIT returned
                return;
            } catch (SQLException e) {
                if (Db.connectionLost(e, db)) {
                    // Uncertain commit: follow the README.  Reconnect; a row
                    // with our hash means it committed: ack.  Otherwise go
                    // round the loop, through the normal path again.
                    Db.closeQuietly(db);
                    db = Db.connect(appUrl);
                    try {
                        if (Db.committed(db, scope, d.messageId(), hash)) {
                            Log.event("uncertain-committed", d.messageId());
                            broker.ack(d);
                            return;
                        }
                        Log.event("uncertain-reprocess", d.messageId());
                    } catch (SQLException again) {
                        Db.rollbackQuietly(db);     // lost again: the loop retries
                    }
                    continue;
                }
                Db.rollbackQuietly(db);
                if ("IB002".equals(e.getSQLState())) {
                    // Same id, different content: the producer reused an id.
                    // Never apply it, never ack it as processed.
                    Log.event("dead-lettered", d.messageId());
                    broker.deadLetter(d, e.getMessage());
                    return;
                }
                if (Db.retryable(e) && attempt < Db.MAX_ATTEMPTS) {
                    Log.event("retry-" + e.getSQLState(), d.messageId());
                    Db.backoff(attempt);
                    continue;
                }
                // Retries ran out, or an error we do not know: let the
                // broker deliver it again later.
                Log.event("nacked-" + e.getSQLState(), d.messageId());
                broker.nack(d);
                return;
            }
        }
    }

    /** The claim and the effect, in one transaction.  true if the effect was applied. */
    private boolean claimAndApply(Broker.Delivery d, byte[] hash) throws SQLException {
        Db.claimSettings(db);               // opens the transaction, with the claim timeout
        boolean fresh;
        try (PreparedStatement claim = db.prepareStatement("SELECT inbox_claim(?, ?, ?)")) {
            claim.setString(1, scope);
            claim.setString(2, d.messageId());
            claim.setBytes(3, hash);
            try (ResultSet rs = claim.executeQuery()) {
                rs.next();
                fresh = rs.getBoolean(1);
            }
        }
        if (fresh) {
            // The business effect.  Everything written here commits or
            // rolls back with the claim.
            try (PreparedStatement effect = db.prepareStatement("""
                    INSERT INTO invoices (scope, message_id, amount, consumer)
                    VALUES (?, ?, (?::jsonb ->> 'amount')::numeric, 'claim')""")) {
                effect.setString(1, scope);
                effect.setString(2, d.messageId());
                effect.setString(3, d.payload());
                effect.executeUpdate();
            }
            Db.simulateWork();
        }
        db.commit();
        return fresh;
    }
}
