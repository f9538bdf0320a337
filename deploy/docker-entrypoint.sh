#!/bin/sh
# The image's entry point: one image, one process kind per container.
#   web         ASGI (HTTP + WebSocket) on $PORT (8000), $WEB_CONCURRENCY worker processes
#               (else $OPENRATH_WEB_WORKERS, else one per CPU the container may use: nproc)
#   worker      Celery worker; Prometheus metrics on $METRICS_PORT (9100)
#   beat        Celery beat (exactly one per deployment)
#   run-worker  the database-claiming worker (runs finish even while Redis is down)
#   migrate     openrath-migrate [--check] with the owner role (MIGRATION_DATABASE_URL)
#   manage      python manage.py <command> (operator CLI)
set -eu
if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
  mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
fi
command="${1:-web}"
[ "$#" -gt 0 ] && shift
case "$command" in
  web)
    # Proxy headers only from the addresses in FORWARDED_ALLOW_IPS (the ingress controller):
    # trusting everyone would let any client choose its own address.
    exec uvicorn openrath_project.asgi:application --host 0.0.0.0 --port "${PORT:-8000}" \
      --workers "${WEB_CONCURRENCY:-${OPENRATH_WEB_WORKERS:-$(nproc)}}" --proxy-headers \
      --forwarded-allow-ips "${FORWARDED_ALLOW_IPS:-127.0.0.1}" --lifespan off \
      --timeout-graceful-shutdown 20 "$@" ;;
  worker)
    exec celery -A openrath_project worker --loglevel "${LOG_LEVEL:-INFO}" \
      --concurrency "${CELERY_CONCURRENCY:-2}" --without-gossip --without-mingle \
      --metrics-port "${METRICS_PORT:-9100}" "$@" ;;
  beat)
    exec celery -A openrath_project beat --loglevel "${LOG_LEVEL:-INFO}" \
      --schedule /tmp/celerybeat-schedule "$@" ;;
  run-worker)
    exec python manage.py run_worker --metrics-port "${METRICS_PORT:-9100}" "$@" ;;
  migrate)
    exec openrath-migrate "$@" ;;
  manage)
    exec python manage.py "$@" ;;
  *)
    exec "$command" "$@" ;;
esac
