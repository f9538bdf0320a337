#!/bin/sh
# The secret files deploy/compose.yaml mounts (compose `secrets:`): one file per secret in
# deploy/secrets/ (or the directory given as $1), random values for those that do not exist yet;
# existing files are kept, so running it again changes nothing. The two database URLs are made
# from the role passwords, so they always agree with what the postgres service sets up.
#
#   sh deploy/compose/init-secrets.sh            # then: docker compose -f deploy/compose.yaml up
#   OPENAI_API_KEY=sk-... sh deploy/compose/init-secrets.sh   # the model provider's key, if any
#
# The directory is 0700 (only its owner on the host gets in); the files are 0444, because each
# container reads its bind-mounted files as its own user (10001 for the app, postgres for the
# database) through the mount, not through this directory. Never commit them: the directory
# ignores itself for git.
set -eu
dir="${1:-$(dirname "$0")/../secrets}"
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
[ -f "$dir/.gitignore" ] || printf '*\n' >"$dir/.gitignore"

random_hex() {  # random_hex BYTES
  od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

put() {  # put NAME VALUE: write the file unless it exists
  if [ ! -f "$dir/$1" ]; then
    printf '%s\n' "$2" >"$dir/$1.tmp"
    chmod 444 "$dir/$1.tmp"
    mv "$dir/$1.tmp" "$dir/$1"
    echo "wrote $dir/$1"
  fi
}

put postgres_password "$(random_hex 24)"
put owner_password "$(random_hex 24)"
put app_password "$(random_hex 24)"
put secret_key "$(random_hex 48)"
put s3_access_key_id "openrath$(random_hex 8)"
put s3_secret_access_key "$(random_hex 24)"
put openai_api_key "${OPENAI_API_KEY:-}"
put redis_url "redis://redis:6379/0"
put database_url "postgres://openrath_app:$(cat "$dir/app_password")@postgres:5432/openrath"
put migration_database_url \
  "postgres://openrath_owner:$(cat "$dir/owner_password")@postgres:5432/openrath"
echo "secrets: $dir"
