// Log.java - one line per event on stdout: what a real consumer would log
// or count.  The crash test reads these lines to report what happened.

final class Log {
    private Log() {}

    static synchronized void event(String what, String detail) {
        System.out.println(what + " " + detail);
        System.out.flush();
    }
}
