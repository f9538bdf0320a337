#!/bin/sh
# SeaweedFS with one S3 identity read from the secret files (compose `secrets:`; no
# credentials in the image, the compose file or the environment), then the server: master,
# volume, filer and the S3 gateway on 8333.
set -eu
umask 077
access_key="$(cat "$S3_ACCESS_KEY_ID_FILE")"
secret_key="$(cat "$S3_SECRET_ACCESS_KEY_FILE")"
cat >/tmp/s3.json <<JSON
{"identities": [{"name": "openrath",
  "credentials": [{"accessKey": "${access_key}", "secretKey": "${secret_key}"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
exec weed server -dir=/data -ip=seaweedfs -ip.bind=0.0.0.0 -s3 -s3.port=8333 \
  -s3.config=/tmp/s3.json -s3.autoCreateBucket=false -s3.port.iceberg=0 -s3.port.lance=0 \
  -master.telemetry=false -volume.preStopSeconds=0 -master.volumeSizeLimitMB=1024
