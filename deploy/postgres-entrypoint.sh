#!/bin/sh
# The PostgreSQL server of deploy/compose.postgres.yml. On first start: a cluster owned by the
# user `ragd` whose password is the stack's service token (RAGD_DATABASE_PASSWORD_FILE), a
# database `ragd` with pgvector, password logins from the compose network only. Then the
# server in the foreground, so the container stops with it.
set -eu
: "${PGDATA:?}"
PASSWORD_FILE=${RAGD_DATABASE_PASSWORD_FILE:-/run/ragd/service-token}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb -D "$PGDATA" -U ragd --pwfile="$PASSWORD_FILE" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
  # initdb admits host logins from loopback only; the stores come from the compose network.
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  # pgvector is created by a superuser once, so the stores' migrations need no such right.
  printf 'CREATE DATABASE ragd;\n' | postgres --single -D "$PGDATA" postgres >/dev/null
  printf 'CREATE EXTENSION IF NOT EXISTS vector;\n' | postgres --single -D "$PGDATA" ragd >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c shared_buffers="${RAGD_POSTGRES_SHARED_BUFFERS:-256MB}" \
  -c max_connections="${RAGD_POSTGRES_MAX_CONNECTIONS:-100}"
