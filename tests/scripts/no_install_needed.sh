#!/usr/bin/env bash
# Where the build succeeded, every package the scripts would install is present: running
# scripts/test again must not call apt. A fake apt-get and sudo on PATH record any call.
# Usage: no_install_needed.sh SOURCE_DIR
set -euo pipefail
root="$1"
fake="$(mktemp -d)"
trap 'rm -rf "$fake"' EXIT
for tool in apt-get sudo; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\nexit 1\n' "$tool" "$fake" >"$fake/$tool"
  chmod +x "$fake/$tool"
done
rc=0
PATH="$fake:$PATH" bash -c 'source "$1/scripts/lib.sh" && ensure_dependencies' _ "$root" || rc=$?
if [ -s "$fake/calls" ]; then
  echo "ensure_dependencies called apt although the build found everything:"
  cat "$fake/calls"
  exit 1
fi
[ "$rc" -eq 0 ] || { echo "ensure_dependencies failed ($rc)"; exit 1; }
"$root/scripts/test" --check-deps
