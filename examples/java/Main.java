// Main.java - runs one consumer of the example.
//
//   java -cp /usr/share/java/postgresql.jar:build Main claim|batch|receive|work
//
// Settings come from the environment (see README.md):
//   INBOX_APP_URL     JDBC URL of the application database (the inbox and invoices)
//   INBOX_BROKER_URL  JDBC URL of the simulated broker's database
//   INBOX_SCOPE       the inbox scope, also the broker topic
//   INBOX_LOSE_ACKS   share of acks the simulated broker loses (default 0)
//   INBOX_FAIL_RATE   share of deferred effects that fail (default 0)
//   INBOX_WORK_MS     time each effect takes, simulated (default 0)

final class Main {
    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "";
        String appUrl = env("INBOX_APP_URL", null);
        String scope = env("INBOX_SCOPE", null);
        double loseAcks = Double.parseDouble(env("INBOX_LOSE_ACKS", "0"));
        double failRate = Double.parseDouble(env("INBOX_FAIL_RATE", "0"));

        switch (mode) {
            case "claim" -> new ClaimConsumer(appUrl, scope, broker(scope, loseAcks)).run();
            case "batch" -> new BatchConsumer(appUrl, scope, broker(scope, loseAcks)).run();
            case "receive" -> new DeferredReceiver(appUrl, scope, broker(scope, loseAcks)).run();
            case "work" -> new DeferredWorker(appUrl, scope, failRate).run();
            default -> {
                System.err.println("usage: Main claim|batch|receive|work");
                System.exit(2);
            }
        }
    }

    // A delivery not acked within 3 s is delivered again.
    private static Broker broker(String topic, double loseAcks) {
        return new Broker(env("INBOX_BROKER_URL", null), topic, loseAcks, 3);
    }

    private static String env(String name, String dflt) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            if (dflt == null) {
                System.err.println("Main: set " + name);
                System.exit(2);
            }
            return dflt;
        }
        return v;
    }
}
