#!/usr/bin/env bash
# scripts/hooks/commit-msg on messages it must take and messages it must refuse.
set -uo pipefail
hook="$1/scripts/hooks/commit-msg"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
expect() {  # expect accept|refuse MESSAGE
  printf '%b' "$2" >"$dir/msg"
  if "$hook" "$dir/msg" 2>/dev/null; then got=accept; else got=refuse; fi
  if [ "$got" != "$1" ]; then
    echo "expected the hook to $1: $(head -1 "$dir/msg")"
    failures=$((failures + 1))
  fi
}
expect accept "Short subject\n\nThe body, as long as it likes to be, on lines of any length at all here.\n"
expect accept "Subject only\n"
expect accept "# a comment git drops\nSubject after a comment\n"
expect accept "$(printf 'x%.0s' $(seq 72))\n"
expect refuse "$(printf 'x%.0s' $(seq 73))\n"
expect refuse "Subject\nbody without the blank line\n"
expect refuse "\n\nbody only\n"
expect accept "Unicode counts characters: é ü ∑ → fine\n"
if [ "$failures" -gt 0 ]; then exit 1; fi
echo "commit-msg hook: 8 messages judged as expected"
