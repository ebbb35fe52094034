#!/usr/bin/env bash
# A headless Chromium for the web page tests (graphrag_pipeline_tests/test_web_page.py), from Debian's
# own packages: Playwright drives it through executable_path (its browser download is never used).
# Idempotent: nothing is installed when a chromium is already on PATH (or at $CHROMIUM).
#   scripts/browser.sh          install if missing, then print the browser's version
set -euo pipefail

log() { echo "[browser] $*" >&2; }

find_chromium() {
  for c in "${CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

if ! exe=$(find_chromium); then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    log "chromium is missing and this user cannot install packages: apt-get install chromium (as root)"; exit 1
  fi
  log "installing Debian's chromium (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
  exe=$(find_chromium) || { log "chromium is still not on PATH after the install"; exit 1; }
fi
log "$("$exe" --version 2>/dev/null || echo "$exe")"
