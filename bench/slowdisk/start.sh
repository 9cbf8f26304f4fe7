#!/usr/bin/env bash
# A private PostgreSQL 15 whose disk flushes slowly: fsync and fdatasync sleep SLOWSYNC_US
# microseconds (default 2000) before flushing (slowsync.c, by LD_PRELOAD), as on network-attached
# storage. For measuring what commits queue on (docs/benchmarks.md, issue 33 item 1, "Hints
# after the commit"). Needs Debian's postgresql-15 binaries and gcc; run as root (the server
# runs as the postgres user).
#
#   bench/slowdisk/start.sh [DIR] [PORT]     # then --database-url postgresql://postgres@127.0.0.1:PORT/postgres
#   bench/slowdisk/start.sh stop [DIR]
set -euo pipefail
BIN=/usr/lib/postgresql/15/bin
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = stop ]; then
    su postgres -c "$BIN/pg_ctl -D ${2:-/tmp/maxclaw-slowdisk}/data stop -m fast"
    exit 0
fi
DIR=${1:-/tmp/maxclaw-slowdisk}
PORT=${2:-5499}
US=${SLOWSYNC_US:-2000}
mkdir -p "$DIR"
gcc -shared -fPIC -O2 -o "$DIR/slowsync.so" "$HERE/slowsync.c" -ldl
chown -R postgres "$DIR"
[ -d "$DIR/data" ] || su postgres -c "$BIN/initdb -D $DIR/data -A trust -U postgres >$DIR/initdb.log"
su postgres -c "LD_PRELOAD=$DIR/slowsync.so SLOWSYNC_US=$US $BIN/pg_ctl -D $DIR/data -l $DIR/pg.log \
    -o '-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=256MB' start"
echo "one-row commit at one client (pgbench, 3 s):"
psql -q -h 127.0.0.1 -p "$PORT" -U postgres -c "CREATE TABLE IF NOT EXISTS slowdisk_probe (a int)"
echo "INSERT INTO slowdisk_probe VALUES (1);" > "$DIR/probe.sql"
$BIN/pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -f "$DIR/probe.sql" -T 3 postgres 2>&1 | grep latency
