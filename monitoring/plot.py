#!/usr/bin/python3
"""monitoring/plot.py - plot the dashboard's series from a real run.

Grafana is not packaged by Debian, so this draws the same expressions as
monitoring/grafana-dashboard.json with matplotlib, from a real
postgres_exporter scraped during a short load on a throwaway cluster:

  1. initdb a cluster in a temporary directory (loopback, a free port),
     with the library preloaded, a 20 s retention and the purge every 1 s;
  2. start prometheus-postgres-exporter on it with
     monitoring/postgres_exporter.yml, on a free loopback port;
  3. run pgbench scripts for about three minutes: claims of ids drawn from
     a fixed range (so duplicates rise as the range fills), receives and
     workers of the deferred mode with some poison messages (dead letters
     after 3 attempts), the workers stopped for a minute, the purge
     disabled for 50 s, and a burst of payload mismatches;
  4. scrape /metrics every 2 s, then compute what the dashboard's
     expressions compute (rate over 10 s, ratios, gauges), and plot them.

Nothing is downloaded.  Needs PostgreSQL 15 with the extension installed,
pgbench, prometheus-postgres-exporter and python3-matplotlib (Debian
packages).  Not a test: a tool for docs/images/monitoring.png.

  /usr/bin/python3 monitoring/plot.py [OUTPUT.png]   (default docs/images/monitoring.png)

(Debian's python3, which python3-matplotlib serves.)

Run as root, it runs the cluster, the exporter and the load as the
"postgres" OS user (initdb refuses root) and writes the image as root.
"""

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
QUERIES = os.path.join(HERE, "postgres_exporter.yml")
EXPORTER = "/usr/bin/prometheus-postgres-exporter"
PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")

SCRAPE_EVERY = 2.0  # seconds
RATE_WINDOW = 10.0  # seconds, the "[10s]" of the rates below

# The load's timeline, in seconds from its start
DURATION = 180
WORKERS_OFF = (60, 120)  # the deferred-mode workers are stopped
PURGE_OFF = (90, 140)  # inbox.purge_enabled = off
MISMATCHES = (30, 45)  # a producer reuses ids with other content


def as_unprivileged():
    """Run this script again as the postgres OS user, then move its image."""
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "docs/images/monitoring.png"))
    tmp = tempfile.mkdtemp(prefix="inbox-plot.")
    shutil.chown(tmp, "postgres")
    try:
        subprocess.run(["runuser", "-u", "postgres", "--", "/usr/bin/python3", os.path.abspath(__file__),
                        os.path.join(tmp, "monitoring.png")], check=True, cwd=tmp)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(os.path.join(tmp, "monitoring.png"), out)
        print(f"plot: wrote {os.path.relpath(out)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    """{(name, (("datname", ..), ("scope", ..))): value} of a scrape, server label dropped"""
    out = {}
    for line in text.splitlines():
        if not line.startswith("inbox_"):
            continue
        m = re.match(r'^(\w+)(?:\{(.*)\})?\s+(\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        labels.pop("server", None)
        out[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
    return out


class Run:
    def __init__(self, work):
        self.work = work
        self.bindir = subprocess.check_output([PG_CONFIG, "--bindir"], text=True).strip()
        self.port = free_port()
        self.data = os.path.join(work, "data")
        self.procs = []
        self.started = False

    def bin(self, name):
        return os.path.join(self.bindir, name)

    def env(self):
        return dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(self.port), PGDATABASE="postgres")

    def psql(self, *statements):
        """Each statement in its own transaction (ALTER SYSTEM needs that)"""
        cmd = [self.bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        for sql in statements:
            cmd += ["-c", sql]
        return subprocess.run(cmd, env=self.env(), check=True, capture_output=True, text=True)

    def start_cluster(self):
        subprocess.run([self.bin("initdb"), "-D", self.data, "-A", "trust", "--no-sync"], check=True,
                       capture_output=True)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"""
listen_addresses = '127.0.0.1'
port = {self.port}
unix_socket_directories = ''
shared_preload_libraries = 'inbox'
max_connections = 40
fsync = off
inbox.retention = 20
inbox.idle_threshold = '1h'
inbox.purge_naptime = 1
inbox.max_attempts = 3
""")
        subprocess.run([self.bin("pg_ctl"), "-D", self.data, "-l", os.path.join(self.work, "server.log"),
                        "-w", "start"], check=True, capture_output=True)
        self.started = True
        # billing keeps its entries a minute, so that redeliveries of the
        # last minute's ids are duplicates; the seeded ids are those the
        # mismatching producer reuses.
        self.psql("CREATE EXTENSION inbox", "SELECT inbox_set_retention('billing', '60 seconds')",
                  "SELECT count(inbox_claim('billing', 'seed-' || g, sha256(('seed ' || g)::bytea)))"
                  " FROM generate_series(1, 500) g")

    def start_exporter(self):
        self.exporter_port = free_port()
        env = dict(os.environ, DATA_SOURCE_NAME=f"host=127.0.0.1 port={self.port} dbname=postgres "
                                                f"user={pwd.getpwuid(os.getuid()).pw_name} sslmode=disable")
        log = open(os.path.join(self.work, "exporter.log"), "w")
        self.procs.append(subprocess.Popen([EXPORTER, f"--extend.query-path={QUERIES}",
                                            f"--web.listen-address=127.0.0.1:{self.exporter_port}"],
                                           env=env, stdout=log, stderr=log))
        for _ in range(100):
            try:
                return self.scrape()
            except OSError:
                time.sleep(0.1)
        raise SystemExit("plot: the exporter does not answer; see exporter.log")

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.exporter_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def pgbench(self, name, script, clients, rate, seconds):
        path = os.path.join(self.work, name + ".sql")
        with open(path, "w") as f:
            f.write(script)
        log = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen([self.bin("pgbench"), "-n", "-f", path, "-c", str(clients), "-j", str(clients),
                              "-R", str(rate), "-T", str(seconds)],
                             env=self.env(), stdout=log, stderr=log)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        if self.started:
            subprocess.run([self.bin("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop"], capture_output=True)


CLAIM = """\\set id random(1, 6000)
SELECT inbox_claim('billing', 'inv-' || :id, sha256(('invoice ' || :id)::bytea));
"""
# Seeded ids with other content; 'return' reports the mismatch as a row
# (and counts it) instead of raising IB002, which would end the client.
MISMATCH = """\\set id random(1, 500)
SELECT count(*) FROM inbox_claim_many('billing', ARRAY['seed-' || :id], ARRAY[sha256('altered'::bytea)], 'return');
"""
RECEIVE = """\\set id random(1, 1000000000)
\\set poison random(1, 100)
SELECT inbox_receive('shipping', 'order-' || :id, jsonb_build_object('poison', :poison <= 3));
"""
WORK = """SELECT count(CASE WHEN payload->>'poison' = 'true'
                   THEN inbox_fail('shipping', receipt, 'carrier API: 400')
                   ELSE inbox_complete('shipping', receipt)::text END)
  FROM inbox_poll('shipping', 5, '30 seconds');
"""


def load(run, t0):
    """The timeline: start and stop each part at its time"""
    def at(t):
        time.sleep(max(0.0, t0 + t - time.time()))

    run.pgbench("claim", CLAIM, 2, 60, DURATION)
    run.pgbench("receive", RECEIVE, 1, 25, DURATION)
    run.pgbench("work", WORK, 2, 12, WORKERS_OFF[0])
    events = [
        (MISMATCHES[0], lambda: run.pgbench("mismatch", MISMATCH, 1, 2, MISMATCHES[1] - MISMATCHES[0])),
        (PURGE_OFF[0], lambda: run.psql("ALTER SYSTEM SET inbox.purge_enabled = off", "SELECT pg_reload_conf()")),
        (WORKERS_OFF[1], lambda: run.pgbench("work-again", WORK, 2, 25, DURATION - WORKERS_OFF[1])),
        (PURGE_OFF[1], lambda: run.psql("ALTER SYSTEM SET inbox.purge_enabled = on", "SELECT pg_reload_conf()")),
    ]
    for t, action in sorted(events, key=lambda e: e[0]):
        at(t)
        action()


def series(samples, name, scope):
    key = (name, (("datname", "postgres"), ("scope", scope)))
    return [(t, s.get(key, float("nan"))) for t, s in samples]


def rate(points):
    """rate(x[RATE_WINDOW]): increase over the window / window, from the scrapes in it"""
    out = []
    for i, (t, v) in enumerate(points):
        old = [(t0, v0) for t0, v0 in points[:i] if t - t0 <= RATE_WINDOW + 0.5]
        if not old:
            out.append((t, float("nan")))
            continue
        t0, v0 = old[0]
        out.append((t, (v - v0) / (t - t0) if v >= v0 else float("nan")))
    return out


def plot(samples, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(13, 10.5), sharex=True)
    fig.suptitle("inbox: the dashboard's series from postgres_exporter, scraped every 2 s during a 3-minute load",
                 fontsize=12)

    def spans(ax, which):
        for (a, b), label, color in which:
            ax.axvspan(a, b, color=color, alpha=0.12, lw=0)
            ax.text((a + b) / 2, 0.97, label, transform=ax.get_xaxis_transform(), ha="center", va="top",
                    fontsize=8, color="0.25")

    workers = (WORKERS_OFF, "workers stopped", "tab:red")
    purge = (PURGE_OFF, "purge off", "tab:purple")
    mism = (MISMATCHES, "mismatches", "tab:orange")

    def xy(points):
        return [p[0] for p in points], [p[1] for p in points]

    ax = axes[0][0]
    for scope, name, label in (("billing", "inbox_claims_total", "billing: new"),
                               ("billing", "inbox_duplicates_total", "billing: duplicates"),
                               ("shipping", "inbox_claims_total", "shipping: new (receives)")):
        ax.plot(*xy(rate(series(samples, name, scope))), label=label)
    ax.set_title("New messages and duplicates per second\nrate(inbox_claims_total[10s]), rate(inbox_duplicates_total[10s])",
                 fontsize=9)
    ax.set_ylabel("per second")
    ax.legend(fontsize=8, loc="center right")

    ax = axes[0][1]
    new = rate(series(samples, "inbox_claims_total", "billing"))
    dup = rate(series(samples, "inbox_duplicates_total", "billing"))
    share = [(t, d / (n + d) * 100 if n + d > 0 else float("nan")) for (t, n), (_, d) in zip(new, dup)]
    ax.plot(*xy(share), color="tab:green", label="billing: duplicate share")
    ax2 = ax.twinx()
    mis = series(samples, "inbox_mismatches_total", "billing")
    ax2.step(*xy(mis), where="post", color="tab:orange", label="billing: mismatches (total)")
    ax2.set_ylabel("mismatches", color="tab:orange")
    spans(ax, [mism])
    ax.set_title("Duplicate share of deliveries, and payload mismatches\n"
                 "duplicates / (new + duplicates); inbox_mismatches_total", fontsize=9)
    ax.set_ylabel("% of deliveries")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="lower right")
    ax2.legend(fontsize=8, loc="center right")

    ax = axes[1][0]
    ax.plot(*xy(series(samples, "inbox_pending", "shipping")), label="pending")
    ax.plot(*xy(series(samples, "inbox_processing", "shipping")), label="processing")
    spans(ax, [workers])
    ax.set_title("Backlog of scope shipping\ninbox_pending, inbox_processing", fontsize=9)
    ax.set_ylabel("messages")
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[1][1]
    ax.plot(*xy(series(samples, "inbox_oldest_pending_age_seconds", "shipping")), color="tab:red")
    spans(ax, [workers])
    ax.set_title("Oldest due message waiting, scope shipping\ninbox_oldest_pending_age_seconds"
                 " (InboxBacklogAge fires above 300 s for 5 min)", fontsize=9)
    ax.set_ylabel("seconds")
    ax.set_ylim(0, max([v for _, v in series(samples, "inbox_oldest_pending_age_seconds", "shipping")
                        if v == v] + [1]) * 1.25)

    ax = axes[2][0]
    ax.plot(*xy(series(samples, "inbox_dead", "shipping")), color="tab:brown", label="shipping: dead letters")
    ax.plot(*xy(rate(series(samples, "inbox_failures_total", "shipping"))), color="tab:gray",
            label="shipping: inbox_fail per second")
    spans(ax, [workers])
    ax.set_title("Dead letters and failures\ninbox_dead, rate(inbox_failures_total[10s])", fontsize=9)
    ax.set_xlabel("seconds since the load started")
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[2][1]
    ax.plot(*xy(series(samples, "inbox_purge_lag_seconds", "billing")), color="tab:purple", label="billing: purge lag (s)")
    ax2 = ax.twinx()
    ax2.plot(*xy(rate(series(samples, "inbox_rows_purged_total", "billing"))), color="tab:cyan",
             label="billing: rows purged per second")
    ax2.set_ylabel("rows per second", color="tab:cyan")
    spans(ax, [purge])
    ax.set_title("Retention (60 s for billing here): purge lag and rows purged\n"
                 "inbox_purge_lag_seconds, rate(inbox_rows_purged_total[10s])", fontsize=9)
    ax.set_xlabel("seconds since the load started")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8, loc="upper left")
    ax2.legend(fontsize=8, loc="center left")

    for row in axes:
        for ax in row:
            ax.grid(alpha=0.3)
            ax.set_xlim(0, DURATION)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def main():
    if os.geteuid() == 0:
        return as_unprivileged()
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "docs/images/monitoring.png"))
    try:
        import matplotlib  # noqa: F401  (fail now, not after the load)
    except ImportError:
        raise SystemExit("plot: matplotlib not found: install python3-matplotlib, run with /usr/bin/python3")
    for path in (EXPORTER, PG_CONFIG):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"plot: {path} not found")
    work = tempfile.mkdtemp(prefix="inbox-plot.")
    run = Run(work)
    try:
        run.start_cluster()
        run.start_exporter()
        samples = []
        t0 = time.time()
        failed = []

        def guarded():
            try:
                load(run, t0)
            except Exception as e:  # noqa: BLE001  (reported after the scrapes)
                failed.append(e)

        loader = threading.Thread(target=guarded, daemon=True)
        loader.start()
        while time.time() - t0 < DURATION:
            t = time.time() - t0
            samples.append((t, parse(run.scrape())))
            time.sleep(max(0.0, SCRAPE_EVERY - (time.time() - t0 - t)))
        loader.join(10)
        for name in ("claim", "receive", "work", "mismatch", "work-again"):
            with open(os.path.join(work, name + ".log")) as f:
                if "aborted" in f.read():
                    print(f"plot: warning: pgbench {name} had clients aborted", file=sys.stderr)
        if failed:
            raise SystemExit(f"plot: the load failed: {failed[0]}")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        plot(samples, out)
        last = samples[-1][1]
        print("plot: %d scrapes; at the end: " % len(samples)
              + ", ".join(f"{n}{{{dict(l).get('scope')}}}={v:g}" for (n, l), v in sorted(last.items())
                          if n in ("inbox_claims_total", "inbox_duplicates_total", "inbox_mismatches_total",
                                   "inbox_dead", "inbox_rows_purged_total")))
        print(f"plot: wrote {out}")
    finally:
        run.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
