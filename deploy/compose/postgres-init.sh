#!/bin/sh
# Runs once, when the PostgreSQL volume is first initialised (docker-entrypoint-initdb.d):
# the owner role (migrations) and the runtime role (DML only), as in docs/operations.md.
# The passwords come from the secret files (compose `secrets:`), never from the environment,
# and are passed as psql variables, so no quoting of their characters can break out.
set -eu
owner_password="$(cat "$OPENRATH_OWNER_PASSWORD_FILE")"
app_password="$(cat "$OPENRATH_APP_PASSWORD_FILE")"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v owner_password="$owner_password" -v app_password="$app_password" <<'SQL'
CREATE ROLE openrath_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE openrath_app LOGIN PASSWORD :'app_password';
CREATE DATABASE openrath OWNER openrath_owner;
\connect openrath
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT CONNECT ON DATABASE openrath TO openrath_app;
SQL
