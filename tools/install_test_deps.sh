#!/usr/bin/env bash
# System packages the test suite needs beyond Python: headless Chromium for the report test.
set -euo pipefail
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "note: chromium not installed and cannot install it here; the browser test will be skipped" >&2
  fi
fi
