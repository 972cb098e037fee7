#!/usr/bin/env bash
# Prepares the database and the demo, prints where everything is, then runs the Procfile with honcho.
# Run through `make run` (platform/with-services.sh provides DATABASE_URL, REDIS_URL, KAFKA_BOOTSTRAP_SERVERS).
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-config.settings.local}"
export WEB_HOST="${WEB_HOST:-127.0.0.1}" WEB_PORT="${WEB_PORT:-8000}" WEB_TLS_PORT="${WEB_TLS_PORT:-8443}"
export PYTHONUNBUFFERED=1
py=.venv/bin/python

port_free() { "$py" -c "import socket,sys; s=socket.socket(); s.bind((sys.argv[1], int(sys.argv[2])))" "$WEB_HOST" "$1" 2>/dev/null; }
if ! port_free "$WEB_PORT"; then
  echo "error: $WEB_HOST:$WEB_PORT is in use; stop what uses it or choose another port: make run WEB_PORT=8001" >&2
  exit 1
fi
if [ "$WEB_TLS_PORT" != off ] && ! port_free "$WEB_TLS_PORT"; then
  echo "error: $WEB_HOST:$WEB_TLS_PORT is in use; stop what uses it or choose another port: make run WEB_TLS_PORT=8444" >&2
  exit 1
fi
"$py" manage.py migrate --noinput -v 0
setup=$("$py" manage.py demo_setup --topic items-snapshots --path /items --avro-topic orders-avro --avro-path /orders)
base="http://$WEB_HOST:$WEB_PORT"
echo
echo "demo: $base/"
if [ "$WEB_TLS_PORT" != off ]; then
  # HTTP/2: a page's streams share one connection (over HTTP/1.1 a browser opens at most six per origin).
  echo "https: https://$WEB_HOST:$WEB_TLS_PORT/ (HTTP/2; ${WEB_TLS_CERT:-a development certificate under var/tls/, self-signed})"
fi
echo "admin: $base/admin/"
echo "api: $base/api/v1/ (docs: $base/api/v1/docs/, AsyncAPI: $base/api/v1/asyncapi.yaml)"
echo "analytics: $base/analytics/ (rolled up every minute from the delivery log topic ${DELIVERY_LOG_TOPIC:-sse-delivery-log})"
echo "metrics: $base/metrics (Prometheus), probes: $base/healthz $base/readyz"
echo "kafka: $KAFKA_BOOTSTRAP_SERVERS"
grep -E '^(admin user|admin password):' <<<"$setup"
echo
# A closed terminal hangs up the whole process group: honcho would die of it at once and leave its processes (each
# in a session of its own) running. It ignores the hangup instead; platform/with-services.sh turns it into a
# SIGTERM, on which honcho stops them all.
trap '' HUP
exec .venv/bin/honcho -f platform/Procfile -d . start
