# Makefile for the inbox extension (PGXS)
#
#   make              build against the pg_config on PATH (or PG_CONFIG=...)
#   make install      install into that PostgreSQL
#   make installcheck pg_regress, isolation and TAP suites, each on its own
#                     temporary instance (run as a non-root OS user)
#   make test         everything above, from a fresh Debian 12 machine, as root
#   make demo         the at-least-once scenario on a throwaway cluster
#   make bench        pgbench ratios against hand-written SQL baselines
#   make examples     the Java and Go consumer examples and their crash test
#   make deb, dist    the Debian package and the PGXN zip, into dist/

# "make" alone builds the library: the rule below for the versioned SQL
# script comes before PGXS's "all"
.DEFAULT_GOAL := all

EXTENSION = inbox
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" inbox.control)

MODULE_big = inbox
OBJS = \
	src/init.o \
	src/access.o \
	src/worker.o \
	src/compat_0_4.o \
	src/claim_many.o \
	src/claim_many_args.o \
	src/complete_many.o \
	src/complete.o \
	src/claim.o \
	src/deferred.o \
	src/deferred_settle.o \
	src/offsets.o \
	src/forget.o \
	src/purge.o \
	src/purge_steps.o \
	src/outbox.o \
	src/outbox_check.o \
	src/guard.o \
	src/window.o \
	src/groups.o \
	src/priorities.o \
	src/events.o \
	src/conflicts.o \
	src/direct.o \
	src/direct_complete.o \
	src/locate.o \
	src/direct_layout.o \
	src/session.o \
	src/front.o \
	src/wakeup.o \
	src/stats.o \
	src/depth.o \
	src/depth_count.o \
	src/distributed.o \
	src/spi.o \
	src/keys.o \
	src/version.o

# sql/inbox.sql is the one hand-written definition of the current version;
# the build copies it to the versioned name CREATE EXTENSION looks for (git
# ignores the copy).  The upgrade scripts beside it are written literally.
DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql
DATA = $(filter-out $(DATA_built),$(wildcard sql/inbox--*--*.sql)) sql/inbox--0.1.0.sql

sql/$(EXTENSION)--$(EXTVERSION).sql: sql/$(EXTENSION).sql
	cp $< $@

# PGXS tracks no header dependencies where the server was built without
# --enable-depend (Debian's): every object is rebuilt when one of our
# headers changes, so that no stale object keeps an old constant (a
# version, a layout) after a pull.
$(OBJS): $(wildcard src/*.h)

# -Wno-unused-parameter: PostgreSQL's own headers (bufpage.h) trip it.
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter

# pg_regress: inputs in sql/, expected output in expected/
REGRESS = setup claim claim_many errors status security settings retention deferred poll complete_many groups priorities headers ranges streams forget limits outbox outbox_checks outbox_routes ingest direct_guard content_window depth drop
REGRESS_OPTS = --temp-instance=tmp_regress --temp-config=test/inbox.conf

# isolation specs and their expected output live under test/isolation/
ISOLATION = claim_commit claim_abort claim_mismatch claim_nowait \
	claim_repeatable_read claim_serializable purge_concurrency deferred_take \
	scope_grants drop_guard purge_private_locks claim_many claim_many_repeat claim_many_mismatch offsets_race forget_race poll_receipts \
	deferred_front content_window outbox_order outbox_relays outbox_unroute ingest_notify groups priorities
ISOLATION_OPTS = --inputdir=test/isolation --temp-instance=tmp_check_iso \
	--temp-config=test/inbox.conf

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl test/citus/*.pl

# The Debian package for PostgreSQL 15 is what the scripts install; any
# other pg_config can be given on the command line.
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
else
# No pg_config yet (a fresh machine): only test, demo and bench, which
# install the build dependencies first, can run.
all install installcheck:
	@echo "pg_config not found: run 'make test' or 'make demo' as root, or test/tools/ensure-deps.sh" >&2
	@exit 1
endif

# The relay (relay/README.md), a program of its own with its own Makefile:
# built and installed with the library wherever its libraries' headers
# are (librabbitmq-dev, libcurl4-openssl-dev, libssl-dev; ensure-deps.sh
# installs them), and skipped with a note elsewhere.  "make relay" insists.
RELAY_BUILDABLE := $(shell pkg-config --exists librabbitmq libcurl libcrypto 2>/dev/null && echo yes)
.PHONY: relay install-relay clean-relay relay-note
relay:
	$(MAKE) -C relay PG_CONFIG=$(PG_CONFIG)
install-relay: relay
	$(MAKE) -C relay PG_CONFIG=$(PG_CONFIG) install
clean-relay:
	$(MAKE) -C relay clean
relay-note:
	@echo "inbox-relay not built: pkg-config finds no librabbitmq, libcurl or libcrypto (install librabbitmq-dev libcurl4-openssl-dev libssl-dev pkg-config)"
ifeq ($(RELAY_BUILDABLE),yes)
all: relay
install: install-relay
else
all: relay-note
endif
clean: clean-relay

# These entry points work on a machine without PostgreSQL's build files:
# test/tools/run.sh installs what is missing first, then calls make again.
.PHONY: test demo bench
test:
	@bash test/tools/run.sh test
demo:
	@bash test/tools/run.sh demo
bench:
	@bash test/tools/run.sh bench

# Packages (docs/packaging.md).  Both write into DISTDIR, dist/ by default
# (ignored by git), and never into the work tree:
#   make deb    postgresql-NN-inbox_X.Y.Z_ARCH.deb with pg_buildext and
#               debhelper, for each installed postgresql-server-dev-NN >= 15
#   make dist   inbox-X.Y.Z.zip for PGXN: git archive of HEAD, META.json checked
DISTDIR ?= dist
.PHONY: deb dist
deb:
	@DISTDIR="$(DISTDIR)" bash test/tools/packages.sh deb
dist:
	@DISTDIR="$(DISTDIR)" bash test/tools/packages.sh dist

# The Java and Go consumer examples (examples/java, examples/go) and their
# crash test; installs the JDK, JDBC, Go and pgx from Debian when run as
# root.  Not part of "make test".
.PHONY: examples
examples:
	@bash examples/run-jvm-go.sh
