#!/usr/bin/env bash
# A throwaway PostgreSQL for portcullis-store's tests, on 127.0.0.1 only.
#
#   pg_env="$(bash .ci/postgres.sh)" && eval "$pg_env"
#
# Installs PostgreSQL from Debian's packages if it is missing, creates a
# private cluster (not the system one) under $PORTCULLIS_PG_DIR, starts it if
# it is not running, creates the test role and database, and prints one line
# on stdout: `export PORTCULLIS_TEST_POSTGRES_URL=…`. Everything else goes to
# stderr. Safe to run again: each step but the last is skipped when already
# done; the test database is dropped and made afresh every time.
#
# The cluster lives under /tmp, not in the work tree, because the server runs
# as the `postgres` user (PostgreSQL refuses to run as root) and a checkout
# under root's home is not readable by it.
set -euo pipefail

port="${PORTCULLIS_PG_PORT:-54329}"
base="${PORTCULLIS_PG_DIR:-/tmp/portcullis-postgres-$port}"
data="$base/data"
user=portcullis
password=portcullis
database=portcullis_test

log() { echo "postgres.sh: $*" >&2; }

find_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

bin="$(find_bin)"
if [[ -z "$bin" || ! -x "$bin/initdb" ]]; then
  log "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y --no-install-recommends postgresql >&2
  bin="$(find_bin)"
fi
[[ -n "$bin" && -x "$bin/initdb" ]] || { log "no initdb after installing postgresql"; exit 1; }

# As root, run the server as `postgres`; as anyone else, as ourselves.
as_owner=()
if [[ "$(id -u)" == 0 ]]; then
  as_owner=(runuser -u postgres --)
fi

mkdir -p "$base"
if [[ "$(id -u)" == 0 ]]; then
  chown postgres:postgres "$base"
fi
chmod 700 "$base"

if [[ ! -f "$data/PG_VERSION" ]]; then
  log "initialising a cluster in $data"
  "${as_owner[@]}" "$bin/initdb" -D "$data" -U postgres -E UTF8 --no-locale \
    --auth-local=trust --auth-host=scram-sha-256 >&2
fi

if ! "${as_owner[@]}" "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  log "starting PostgreSQL on 127.0.0.1:$port"
  "${as_owner[@]}" "$bin/pg_ctl" -D "$data" -l "$base/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $base" start >&2 || {
    log "PostgreSQL did not start; its log:"
    tail -n 30 "$base/server.log" >&2 || true
    exit 1
  }
fi

psql_admin() {
  "${as_owner[@]}" "$bin/psql" -h "$base" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"
}

if [[ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$user'")" != 1 ]]; then
  psql_admin -c "CREATE ROLE $user LOGIN PASSWORD '$password'" >&2
fi
# A fresh database every run: one left behind by another checkout (a branch
# with a newer schema step, say) would fail the store's "refuses a newer
# schema" guard, or hide a migration bug behind tables this build did not make.
psql_admin -c "DROP DATABASE IF EXISTS $database WITH (FORCE)" >&2
psql_admin -c "CREATE DATABASE $database OWNER $user" >&2

log "ready"
echo "export PORTCULLIS_TEST_POSTGRES_URL=postgres://$user:$password@127.0.0.1:$port/$database"
