#!/usr/bin/env bash
# Runs the official MCP conformance suite against Portcullis' fixture server
# (crates/portcullis-server/src/bin/portcullis-conformance-fixture.rs) over
# Streamable HTTP on loopback:
#   1. @modelcontextprotocol/conformance@0.1.16, server scenarios, default suite
#   2. @modelcontextprotocol/conformance@0.2.0-alpha.12 --requirements 2026-07-28
#      The runner scores only the 37 required server scenarios and exits 0 when
#      they all pass; it also runs unscored ones and reports them apart. Those
#      that fail today, and why:
#        tasks-* (extension, 9 of 10): the fixture does not implement the
#          io.modelcontextprotocol/tasks extension (SEP-2663), and neither does
#          portcullis-server; a server that does not declare it is conformant.
#      No expected-failures baseline is needed for them; if one is ever needed,
#      put it in .ci/conformance-2026-expected-failures.yml (unscored scenarios
#      only, each with its reason) and it is passed to the runner.
# Exits non-zero if any scored scenario fails. Peers come from .ci/peers.sh.
# Usage: bash .ci/conformance.sh   (from anywhere; results in target/conformance/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
P="$ROOT/.peers"
[ -f "$P/.installed-v1" ] || bash .ci/peers.sh
N22="$P/node22/node_modules/.bin/node"
LOOP="--require $P/loopback-only.cjs"
CONF="$P/node_modules/@modelcontextprotocol/conformance/dist/index.js"
CONF_NEXT="$P/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js"
OUT="$ROOT/target/conformance"
mkdir -p "$OUT"

echo "== building the fixture server"
cargo build -p portcullis-server --bin portcullis-conformance-fixture
# Honour CARGO_TARGET_DIR, as cargo does.
FIXTURE="${CARGO_TARGET_DIR:-$ROOT/target}/debug/portcullis-conformance-fixture"

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$FIXTURE" --port "$PORT" > "$OUT/fixture.log" 2>&1 &
FIXTURE_PID=$!
trap 'kill "$FIXTURE_PID" 2>/dev/null || true; wait "$FIXTURE_PID" 2>/dev/null || true' EXIT
listening=no
for _ in $(seq 1 100); do
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null; then
    listening=yes; break
  fi
  kill -0 "$FIXTURE_PID" 2>/dev/null || break
  sleep 0.1
done
if [ "$listening" != yes ]; then
  echo "== the fixture server did not start; its output:" >&2
  cat "$OUT/fixture.log" >&2
  exit 1
fi
URL="http://localhost:$PORT/mcp"
echo "== fixture on $URL (pid $FIXTURE_PID)"

status=0
echo "== conformance 0.1.16: server scenarios, default suite"
if NODE_OPTIONS="$LOOP" "$N22" "$CONF" server --url "$URL" -o "$OUT/0.1.16" > "$OUT/0.1.16.log" 2>&1; then
  echo "   exit 0"
else
  echo "   exit $? (FAILED)"; status=1
fi
sed -n '/=== SUMMARY ===/,$p' "$OUT/0.1.16.log"

echo "== conformance 0.2.0-alpha.12: --requirements 2026-07-28"
BASELINE="$ROOT/.ci/conformance-2026-expected-failures.yml"
EXPECT=()
[ -f "$BASELINE" ] && EXPECT=(--expected-failures "$BASELINE")
if NODE_OPTIONS="$LOOP" "$N22" "$CONF_NEXT" server --url "$URL" --requirements 2026-07-28 "${EXPECT[@]}" \
    -o "$OUT/2026-07-28" > "$OUT/2026-07-28.log" 2>&1; then
  echo "   exit 0"
else
  echo "   exit $? (FAILED)"; status=1
fi
sed -n '/=== SUMMARY ===/,$p' "$OUT/2026-07-28.log"

if [ "$status" -ne 0 ]; then
  echo "== conformance FAILED; full logs in $OUT"
fi
exit "$status"
