#!/bin/sh
# A native tool handler: the request arrives on stdin as
#   {"arguments": {"name": "…"}, "context": {"config": {}}}
# and whatever is printed on stdout is the tool's text result (an MCP
# CallToolResult as JSON works too). Plain POSIX sh, so the example runs
# anywhere without installing anything.
request=$(cat)
name=$(printf '%s' "$request" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')
printf 'Hello, %s!\n' "${name:-stranger}"
