#!/usr/bin/env bash
# Screenshots of the docs site's front page and one concept page (docs/img/docs-*.png), with
# Debian's headless Chromium (apt-get install -y chromium), no network needed:
#   bash scripts/screenshot_docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$site"
for page in index concepts/schedules; do
  name=$(echo "$page" | tr / -)
  url="file://$site/$([ "$page" = index ] && echo index.html || echo "$page/index.html")"
  profile=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$profile" --window-size=1280,1400 \
    --screenshot="docs/img/docs-$name.png" "$url" >/dev/null 2>&1
  rm -rf "$profile"
  echo "wrote docs/img/docs-$name.png"
done
rm -rf "$site"
