#!/bin/sh
# A local Postgres for STORE = "postgres" (docs/postgres.md): one cluster in
# the project's ignored state, listening on loopback only, with a password.
# needs: postgres
#
#   scripts/postgres.sh start      initdb on first use, start, create the
#                                  database, apply migrations-postgres/
#   scripts/postgres.sh stop | restart | status
#   scripts/postgres.sh stop-server  the server alone (the pooler stays up)
#   scripts/postgres.sh url        the connection string: through the
#                                  pooler (PG_POOLER=none: to the server)
#   scripts/postgres.sh direct-url the server's own
#   scripts/postgres.sh dir        where the cluster lives
#   scripts/postgres.sh migrate    apply migrations-postgres/ (PG_REMOTE=1:
#                                  to the database PGHOST, PGUSER, … name)
#   scripts/postgres.sh psql ...   psql on the database
#
# The worker reaches the cluster as it reaches a deployment's database
# through Hyperdrive: through a pooler in transaction mode (PgBouncer, on
# the server's port + 10000), which gives each transaction whichever server
# connection is free, so that nothing of a session outlives its
# transaction, and no event opens a server connection of its own.
#
# PG_DIR (default .wrangler/$PG_CLUSTER, the cluster postgres), PG_PORT
# (5433; the cluster postgres-test's: from the checkout's path) and PG_DB
# (webhooks) choose another cluster or database. Debian's
# postgresql package provides the server (scripts/setup.sh --with-postgres
# installs it). As root, the server runs as the `postgres` user, since it
# refuses to run as root; where that user cannot reach the checkout (a
# directory closed to others), the cluster lives in that user's home
# instead (/var/lib/postgresql/webhooks-clusters/), in a folder named after
# the checkout's path, and `start` says where.
set -eu
# The checkout's real path: a symlink to it names the same cluster and port.
cd -P "$(dirname "$0")/.."
CLUSTER=${PG_CLUSTER:-postgres}

# The checkout's folder outside it: in the home of the user postgres (which
# no other user can write to), root's own, its path's characters and a hash
# of the whole path, so that two checkouts never share one.
outside() {
    home=$(getent passwd postgres | cut -d: -f6)
    slug=$(printf '%s' "$PWD" | tr -c 'A-Za-z0-9._-' '-' | sed 's/^-*//' | cut -c1-80)
    echo "$home/webhooks-clusters/$slug-$(printf '%s' "$PWD" | cksum | cut -d' ' -f1)"
}
# Whether the user postgres can reach the checkout's .wrangler/.
reachable() {
    runuser -u postgres -- test -x "$PWD/.wrangler" -o ! -e "$PWD/.wrangler" -a -x "$PWD" 2>/dev/null
}
if [ -n "${PG_DIR:-}" ]; then
    DIR=$PG_DIR
elif [ -f "$PWD/.wrangler/$CLUSTER/PG_VERSION" ] || [ "$(id -u)" != 0 ] || ! id postgres >/dev/null 2>&1; then
    DIR=$PWD/.wrangler/$CLUSTER
elif [ -f "$(outside)/$CLUSTER/PG_VERSION" ] || ! reachable; then
    DIR=$(outside)/$CLUSTER
    OUTSIDE=true
else
    DIR=$PWD/.wrangler/$CLUSTER
fi

# Makes the folder outside, root's own: refused if any part of it is a
# link or someone else's.
prepare_outside() {
    for dir in "$(dirname "$(dirname "$DIR")")" "$(dirname "$DIR")"; do
        [ -e "$dir" ] || [ -L "$dir" ] || mkdir -m 755 "$dir"
        if [ -L "$dir" ] || [ ! -d "$dir" ] || [ "$(stat -c %u "$dir")" != 0 ]; then
            echo "postgres: $dir is not a folder of root's own: set PG_DIR to a directory the user postgres can reach" >&2
            exit 1
        fi
    done
}
# The test cluster (postgres-test: the end-to-end tests', and cargo
# test's for the effects) on a port of the checkout's own, from its path,
# so that two checkouts' test runs never meet on one.
if [ "$CLUSTER" = postgres-test ]; then
    PORT=${PG_PORT:-$((20000 + $(printf '%s' "$PWD" | cksum | cut -d' ' -f1) % 10000))}
else
    PORT=${PG_PORT:-5433}
fi
POOL_PORT=$((PORT + 10000))
POOLER=$DIR/pooler
DB=${PG_DB:-webhooks}
ROLE=webhooks
PASSWORD=webhooks
# The server of the cluster's own version, or the newest for a new one.
if [ -f "$DIR/PG_VERSION" ] && [ -d "/usr/lib/postgresql/$(cat "$DIR/PG_VERSION")/bin" ]; then
    BIN=/usr/lib/postgresql/$(cat "$DIR/PG_VERSION")/bin
else
    BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
if [ -z "$BIN" ] && [ -z "${PG_REMOTE:-}" ]; then
    echo "postgres: no server: run scripts/setup.sh --with-postgres" >&2
    exit 1
fi

owner() {
    # From /: the user postgres may not be able to enter the checkout.
    if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}
direct_url() {
    echo "postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DB"
}
url() {
    if [ "${PG_POOLER:-pgbouncer}" = none ]; then
        direct_url
    else
        echo "postgresql://$ROLE:$PASSWORD@127.0.0.1:$POOL_PORT/$DB"
    fi
}
psql_db() {
    if [ -n "${PG_REMOTE:-}" ]; then
        # make deploy's database, named by PGHOST, PGUSER, PGPASSWORD, …
        # (scripts/deploy-postgres.mjs): no password on a command line, and
        # no startup options, which some poolers refuse.
        psql -X -q -w -v ON_ERROR_STOP=1 "$@"
    else
        PGSSLMODE=disable PGOPTIONS="-c client_min_messages=warning" PGPASSWORD=$PASSWORD psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d "$DB" "$@"
    fi
}

start() {
    if [ ! -f "$DIR/PG_VERSION" ]; then
        if [ -n "${OUTSIDE:-}" ]; then
            echo "postgres: the user postgres cannot reach $PWD; the cluster lives in $DIR" >&2
        fi
        mkdir -p "$DIR"
        if [ "$(id -u)" = 0 ]; then
            chown postgres "$DIR"
            if ! runuser -u postgres -- test -w "$DIR"; then
                echo "postgres: the user postgres cannot reach $DIR (a parent directory closed to others?): set PG_DIR to a directory it can" >&2
                exit 1
            fi
        fi
        pwfile=$(mktemp)
        echo "$PASSWORD" >"$pwfile"
        chmod 644 "$pwfile"
        owner "$BIN/initdb" -D "$DIR" -U "$ROLE" --pwfile="$pwfile" -A scram-sha-256 \
            -E UTF8 --locale=C.UTF-8 >/dev/null
        rm -f "$pwfile"
    fi
    if ! owner "$BIN/pg_ctl" -D "$DIR" status >/dev/null 2>&1; then
        # Not with the lock: the server would hold it as long as it runs. In
        # a session of its own: stopping (or killing) whoever started it
        # (make dev, a test) leaves it running.
        owner setsid "$BIN/pg_ctl" -D "$DIR" -l "$DIR/server.log" -w -o "-p $PORT -k '' -c listen_addresses=127.0.0.1" start >/dev/null 9>&-
    fi
    if ! PGSSLMODE=disable PGPASSWORD=$PASSWORD psql -X -tA -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d postgres \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
        PGSSLMODE=disable PGPASSWORD=$PASSWORD psql -X -q -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d postgres -c "CREATE DATABASE \"$DB\""
    fi
    # PG_MIGRATE=0: the server and the database alone (cargo test's harness
    # makes a database of its own per test, migrations and all).
    [ "${PG_MIGRATE:-1}" = 0 ] || migrate
    [ "${PG_POOLER:-pgbouncer}" = none ] || pooler
}

# PgBouncer in transaction mode, for every database of the cluster; started
# once, and left running as the server is. Quick to say the server is down
# (within the worker's 5 s): a client waits at most 2 s for a connection.
pooler_running() {
    [ -f "$POOLER/pgbouncer.pid" ] && grep -q pgbouncer "/proc/$(cat "$POOLER/pgbouncer.pid")/cmdline" 2>/dev/null
}
pooler() {
    if pooler_running; then
        return
    fi
    if [ ! -x /usr/sbin/pgbouncer ]; then
        echo "postgres: no pooler: run scripts/setup.sh --with-postgres (or set PG_POOLER=none)" >&2
        exit 1
    fi
    owner mkdir -p "$POOLER"
    # The role's SCRAM secret, as the server keeps it: the pooler then
    # offers the server's salt, as Postgres would, and logs in to the
    # server with the keys the client proved.
    secret=$(PGSSLMODE=disable PGPASSWORD=$PASSWORD psql -X -tA -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d postgres \
        -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$ROLE'")
    printf '"%s" "%s"\n' "$ROLE" "$secret" | owner sh -c "umask 077; cat >'$POOLER/userlist.txt'"
    owner sh -c "cat >'$POOLER/pgbouncer.ini'" <<EOF
[databases]
* = host=127.0.0.1 port=$PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $POOL_PORT
unix_socket_dir =
pidfile = $POOLER/pgbouncer.pid
logfile = $POOLER/pgbouncer.log
auth_type = scram-sha-256
auth_file = $POOLER/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 10
max_db_connections = 20
server_idle_timeout = 10
server_connect_timeout = 2
server_login_retry = 1
query_wait_timeout = 2
log_connections = 0
log_disconnections = 0
EOF
    owner setsid /usr/sbin/pgbouncer -d -q "$POOLER/pgbouncer.ini" 9>&-
}

stop_pooler() {
    if pooler_running; then
        kill "$(cat "$POOLER/pgbouncer.pid")" 2>/dev/null || true
    fi
}

# Each file of migrations-postgres/ once, in order, each in one transaction.
migrate() {
    psql_db -c "CREATE TABLE IF NOT EXISTS webhook_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    for file in migrations-postgres/*.sql; do
        name=$(basename "$file")
        if [ -z "$(psql_db -tA -c "SELECT 1 FROM webhook_migrations WHERE name = '$name'")" ]; then
            psql_db -1 -f "$file" -c "INSERT INTO webhook_migrations (name) VALUES ('$name')"
        fi
    done
}

case "${1:-}" in
start)
    # One start at a time per cluster (two test runs, a test and make dev).
    if [ -n "${OUTSIDE:-}" ]; then prepare_outside; else mkdir -p "$(dirname "$DIR")"; fi
    exec 9>"$DIR.lock"
    flock 9
    start
    ;;
stop)
    stop_pooler
    owner "$BIN/pg_ctl" -D "$DIR" -w -m fast stop >/dev/null 2>&1 || true
    ;;
# The server alone, its pooler left up: a database down behind Hyperdrive.
stop-server) owner "$BIN/pg_ctl" -D "$DIR" -w -m fast stop >/dev/null 2>&1 || true ;;
restart) owner setsid "$BIN/pg_ctl" -D "$DIR" -w -m "${2:-fast}" restart -o "-p $PORT -k '' -c listen_addresses=127.0.0.1" >/dev/null ;;
status) owner "$BIN/pg_ctl" -D "$DIR" status ;;
url) url ;;
direct-url) direct_url ;;
dir) echo "$DIR" ;;
migrate) migrate ;;
psql) shift; psql_db "$@" ;;
*) echo "usage: scripts/postgres.sh start|stop|restart [immediate]|stop-server|status|url|direct-url|dir|migrate|psql ..." >&2; exit 2 ;;
esac
