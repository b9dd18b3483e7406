#!/usr/bin/env bash
# Installs the plotting library that `grux cost sweep --format html` inlines into its reports
# (plotly.js-dist-min, the exact version and checksum in web/package-lock.json) into
# web/node_modules, with npm from Debian's npm package (scripts/install-deps.sh installs it).
# Does nothing when the installed copy already matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../web"
want=$(sed -n 's/.*"plotly.js-dist-min": "\([^"]*\)".*/\1/p' package.json | head -1)
have=$(sed -n 's/.*"version": "\([^"]*\)".*/\1/p' node_modules/plotly.js-dist-min/package.json 2>/dev/null | head -1 || true)
if [ -n "$want" ] && [ "$want" = "$have" ] && [ -s node_modules/plotly.js-dist-min/plotly.min.js ]; then
  echo "install-web-assets: plotly.js-dist-min $have present"
  exit 0
fi
command -v npm >/dev/null || { echo "install-web-assets: npm is missing; run scripts/install-deps.sh" >&2; exit 1; }
echo "install-web-assets: installing plotly.js-dist-min $want (npm ci, from web/package-lock.json)"
npm ci --no-audit --no-fund --loglevel=error
test -s node_modules/plotly.js-dist-min/plotly.min.js
