// BatchConsumer.java - a whole batch of deliveries in one transaction, with
// one inbox_claim_many call: the shape of a Kafka consumer that commits its
// offsets after each poll.
//
//   BEGIN; inbox_claim_many(scope, ids, hashes, on_mismatch => 'return');
//   INSERT the effects of the rows 'claimed'; COMMIT
//   -> ack 'claimed' and 'duplicate', dead-letter 'mismatch'
//
// on_mismatch => 'return' reports a reused id as a row instead of raising
// IB002 for the whole batch, so one bad message does not hold up the rest.

import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;

final class BatchConsumer {
    private static final int BATCH = 20;

    private final String appUrl;
    private final String scope;
    private final Broker broker;
    private Connection db;

    BatchConsumer(String appUrl, String scope, Broker broker) {
        this.appUrl = appUrl;
        this.scope = scope;
        this.broker = broker;
    }

    void run() throws InterruptedException {
        db = Db.connect(appUrl);
        while (true) {
            List<Broker.Delivery> batch;
            try {
                batch = broker.fetch(BATCH);
            } catch (SQLException e) {
                Thread.sleep(200);
                continue;
            }
            if (batch.isEmpty()) {
                Thread.sleep(100);
                continue;
            }
            handle(batch);
        }
    }

    private void handle(List<Broker.Delivery> batch) throws InterruptedException {
        for (int attempt = 1; ; attempt++) {
            try {
                String[] status = claimAndApply(batch);     // commits
                for (int i = 0; i < batch.size(); i++) {
                    Broker.Delivery d = batch.get(i);
                    switch (status[i]) {
                        case "claimed" -> { Log.event("applied", d.messageId()); broker.ack(d); }
                        case "duplicate" -> { Log.event("duplicate", d.messageId()); broker.ack(d); }
                        default -> {        // "mismatch": never applied
                            Log.event("dead-lettered", d.messageId());
                            broker.deadLetter(d, "payload mismatch (IB002)");
                        }
                    }
                }
                return;
            } catch (SQLException e) {
                if (Db.connectionLost(e, db)) {
                    // Uncertain commit, per message as the README says: ack
                    // what committed, run the rest through the normal path.
                    Db.closeQuietly(db);
                    db = Db.connect(appUrl);
                    List<Broker.Delivery> rest = new ArrayList<>();
                    try {
                        for (Broker.Delivery d : batch) {
                            if (Db.committed(db, scope, d.messageId(), Db.sha256(d.payload()))) {
                                Log.event("uncertain-committed", d.messageId());
                                broker.ack(d);
                            } else {
                                rest.add(d);
                            }
                        }
                    } catch (SQLException again) {
                        Db.rollbackQuietly(db);
                        continue;           // lost again: start over with the same batch
                    }
                    if (rest.isEmpty())
                        return;
                    Log.event("uncertain-reprocess", rest.size() + " messages");
                    batch = rest;
                    continue;
                }
                Db.rollbackQuietly(db);
                if (Db.retryable(e) && attempt < Db.MAX_ATTEMPTS) {
                    Log.event("retry-" + e.getSQLState(), batch.size() + " messages");
                    Db.backoff(attempt);
                    continue;
                }
                Log.event("nacked-" + e.getSQLState(), batch.size() + " messages");
                batch.forEach(broker::nack);
                return;
            }
        }
    }

    /** Claims the batch and applies the effects of the new messages; returns each delivery's status. */
    private String[] claimAndApply(List<Broker.Delivery> batch) throws SQLException {
        int n = batch.size();
        String[] ids = new String[n];
        byte[][] hashes = new byte[n][];
        for (int i = 0; i < n; i++) {
            ids[i] = batch.get(i).messageId();
            hashes[i] = Db.sha256(batch.get(i).payload());
        }
        String[] status = new String[n];
        Db.claimSettings(db);               // opens the transaction, with the claim timeout
        Array idArray = db.createArrayOf("text", ids);
        Array hashArray = db.createArrayOf("bytea", hashes);
        try (PreparedStatement claim = db.prepareStatement(
                "SELECT ordinality, status FROM inbox_claim_many(?, ?, ?, on_mismatch => 'return')")) {
            claim.setString(1, scope);
            claim.setArray(2, idArray);
            claim.setArray(3, hashArray);
            try (ResultSet rs = claim.executeQuery()) {
                while (rs.next())
                    status[rs.getInt(1) - 1] = rs.getString(2);     // ordinality counts from 1
            }
        }
        try (PreparedStatement effect = db.prepareStatement("""
                INSERT INTO invoices (scope, message_id, amount, consumer)
                VALUES (?, ?, (?::jsonb ->> 'amount')::numeric, 'batch')""")) {
            for (int i = 0; i < n; i++) {
                if (!"claimed".equals(status[i]))
                    continue;               // a duplicate or a mismatch: no effect
                effect.setString(1, scope);
                effect.setString(2, ids[i]);
                effect.setString(3, batch.get(i).payload());
                effect.addBatch();
            }
            effect.executeBatch();
        }
        Db.simulateWork();
        db.commit();
        return status;
    }
}
