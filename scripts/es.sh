#!/usr/bin/env bash
# Start or stop a single-node Elasticsearch for tests and local use, from Elastic's own
# integration-test distribution on Maven Central (fetched once with mvn, cached in .es/).
#   scripts/es.sh start | stop | status
# Settings: ES_VERSION (9.2.4), ES_PORT (9200), ES_HEAP (512m), ES_DIR (.es in the project).
set -euo pipefail

ES_VERSION=${ES_VERSION:-9.2.4}
ES_PORT=${ES_PORT:-9200}
ES_HEAP=${ES_HEAP:-512m}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ES_DIR=${ES_DIR:-$ROOT/.es}
HOME_DIR="$ES_DIR/elasticsearch-$ES_VERSION"
RUN_DIR="$ES_DIR/run"
PID_FILE="$RUN_DIR/es-$ES_PORT.pid"
URL="http://127.0.0.1:$ES_PORT"
ES_USER=${ES_USER:-graphrag-es}

log() { echo "[es] $*" >&2; }

java_home() {
  # Elasticsearch 9 needs Java 21 or newer: prefer a Temurin JDK, then any JDK >= 21
  for jdk in /usr/lib/jvm/temurin-*-jdk* /usr/lib/jvm/*; do
    [ -x "$jdk/bin/java" ] || continue
    major=$("$jdk/bin/java" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
    if [ "${major%%.*}" -ge 21 ] 2>/dev/null; then echo "$jdk"; return 0; fi
  done
  log "no JDK 21+ found under /usr/lib/jvm (Elasticsearch $ES_VERSION needs one)"; return 1
}

healthy() { curl -fsS "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" >/dev/null 2>&1; }

fetch() {
  [ -x "$HOME_DIR/bin/elasticsearch" ] && return 0
  mkdir -p "$ES_DIR/dist"
  local zip="$ES_DIR/dist/elasticsearch-$ES_VERSION.zip"
  if [ ! -s "$zip" ]; then
    log "fetching org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION from Maven Central"
    mvn -q -B dependency:copy \
      -Dartifact="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip" \
      -DoutputDirectory="$ES_DIR/dist" -Dmdep.overWriteIfNewer=true
  fi
  log "unpacking $zip"
  (cd "$ES_DIR" && unzip -q -o "$zip")
}

as_es_user() {
  if [ "$(id -u)" = 0 ]; then
    id "$ES_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$ES_USER"
    chown -R "$ES_USER" "$HOME_DIR" "$ES_DIR/data-$ES_PORT" "$ES_DIR/logs-$ES_PORT" "$RUN_DIR"
    runuser -u "$ES_USER" -- "$@"
  else
    "$@"
  fi
}

start() {
  if healthy; then log "already running at $URL"; return 0; fi
  fetch
  local jdk; jdk=$(java_home)
  mkdir -p "$ES_DIR/data-$ES_PORT" "$ES_DIR/logs-$ES_PORT" "$RUN_DIR"
  log "starting Elasticsearch $ES_VERSION on $URL (heap $ES_HEAP, JDK $jdk)"
  as_es_user env ES_JAVA_HOME="$jdk" ES_JAVA_OPTS="-Xms$ES_HEAP -Xmx$ES_HEAP" \
    "$HOME_DIR/bin/elasticsearch" -d -p "$PID_FILE" \
    -E cluster.name=graphrag-test -E node.name=graphrag-test -E discovery.type=single-node \
    -E network.host=127.0.0.1 -E http.port="$ES_PORT" -E transport.port=$((ES_PORT + 100)) \
    -E xpack.security.enabled=false \
    -E cluster.routing.allocation.disk.threshold_enabled=false \
    -E action.destructive_requires_name=false \
    -E path.data="$ES_DIR/data-$ES_PORT" -E path.logs="$ES_DIR/logs-$ES_PORT" >/dev/null
  for _ in $(seq 1 90); do
    if healthy; then log "ready at $URL"; return 0; fi
    sleep 1
  done
  log "Elasticsearch did not become healthy within 90 s; last log lines:"
  tail -n 30 "$ES_DIR/logs-$ES_PORT/graphrag-test.log" >&2 || true
  return 1
}

stop() {
  if [ -s "$PID_FILE" ]; then
    local pid; pid=$(cat "$PID_FILE")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    log "stopped"
  else
    log "not running (no pid file)"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if healthy; then echo "running at $URL"; else echo "not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
