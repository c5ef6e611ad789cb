// DeferredReceiver.java - deferred mode, first half: store the message in
// the inbox as pending, then ack the broker at once.  DeferredWorker applies
// the effect later.
//
//   delivery -> inbox_receive(scope, id, payload, hash) -> ack
//
// true (stored) and false (stored already: a redelivery) are both acked.
// The receive is its own short transaction, so the broker waits only for
// one INSERT.

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.List;

final class DeferredReceiver {
    private final String appUrl;
    private final String scope;
    private final Broker broker;
    private Connection db;

    DeferredReceiver(String appUrl, String scope, Broker broker) {
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
                Thread.sleep(200);
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
                boolean fresh;
                Db.claimSettings(db);       // the receive claims the id: under the claim timeout
                try (PreparedStatement st = db.prepareStatement("SELECT inbox_receive(?, ?, ?::jsonb, ?)")) {
                    st.setString(1, scope);
                    st.setString(2, d.messageId());
                    st.setString(3, d.payload());
                    st.setBytes(4, hash);
                    try (ResultSet rs = st.executeQuery()) {
                        rs.next();
                        fresh = rs.getBoolean(1);
                    }
                }
                db.commit();
                Log.event(fresh ? "received" : "duplicate", d.messageId());
                broker.ack(d);
                return;
            } catch (SQLException e) {
                if (Db.connectionLost(e, db)) {
                    // The same uncertain-commit procedure as a claim.
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
                        Db.rollbackQuietly(db);
                    }
                    continue;
                }
                Db.rollbackQuietly(db);
                if ("IB002".equals(e.getSQLState())) {
                    Log.event("dead-lettered", d.messageId());
                    broker.deadLetter(d, e.getMessage());
                    return;
                }
                if (Db.retryable(e) && attempt < Db.MAX_ATTEMPTS) {
                    Log.event("retry-" + e.getSQLState(), d.messageId());
                    Db.backoff(attempt);
                    continue;
                }
                Log.event("nacked-" + e.getSQLState(), d.messageId());
                broker.nack(d);
                return;
            }
        }
    }
}
