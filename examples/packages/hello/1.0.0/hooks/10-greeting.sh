#!/usr/bin/env bash
# beforeHelm hook: turns the `message` setting into the `greeting` value the templates render.
set -euo pipefail

if [[ "${1:-}" == "--config" ]]; then
  cat <<'CONFIG'
configVersion: v1
beforeHelm: 10
CONFIG
  exit 0
fi

message=$(jq -r '.message' "$CONFIG_VALUES_PATH")
jq -n --arg greeting "Hello, ${message}!" \
  '[{"op": "add", "path": "/greeting", "value": $greeting}]' > "$VALUES_JSON_PATCH_PATH"
