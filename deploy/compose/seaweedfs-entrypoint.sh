#!/bin/sh
# SeaweedFS with one S3 identity taken from the environment (no credentials in the image or
# the compose file), then the server: master, volume, filer and the S3 gateway on 8333.
set -eu
umask 077
cat >/tmp/s3.json <<JSON
{"identities": [{"name": "openrath",
  "credentials": [{"accessKey": "${S3_ACCESS_KEY_ID}", "secretKey": "${S3_SECRET_ACCESS_KEY}"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
exec weed server -dir=/data -ip=seaweedfs -ip.bind=0.0.0.0 -s3 -s3.port=8333 \
  -s3.config=/tmp/s3.json -s3.autoCreateBucket=false -s3.port.iceberg=0 -s3.port.lance=0 \
  -master.telemetry=false -volume.preStopSeconds=0 -master.volumeSizeLimitMB=1024
