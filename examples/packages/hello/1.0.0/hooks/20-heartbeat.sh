#!/usr/bin/env bash
# schedule hook: runs every minute and logs what it was woken for.
set -euo pipefail

if [[ "${1:-}" == "--config" ]]; then
  cat <<'CONFIG'
configVersion: v1
schedule:
- name: heartbeat
  crontab: "* * * * *"
CONFIG
  exit 0
fi

echo "heartbeat for ${APPLICATION_NAMESPACE}/${APPLICATION_NAME}: $(jq -c '[.[].binding]' "$BINDING_CONTEXT_PATH")"
