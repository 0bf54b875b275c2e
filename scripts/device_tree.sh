#!/usr/bin/env bash
# The device tool sends the working tree (tracked and untracked-not-ignored files, plus `carry`)
# and refuses more than 64 MiB; the committed results/ alone are larger. This leaves out of the
# tree every results/ folder but those a call needs, and puts them back after.
#
#   scripts/device_tree.sh slim [--no-batch] KEEP...   keep only these results/ paths tracked
#   scripts/device_tree.sh restore                     track everything again, as before
#   scripts/device_tree.sh size [CARRY...]             MiB that a call would send
#
# slim: `git rm --cached` of each other results/ folder (the files stay on disk) and an entry
# for it in .git/info/exclude, so that it neither travels nor shows as untracked; --no-batch
# also leaves out the `*-batch` folders under KEEP (a frontier step reads only the run folders).
# While slimmed, a pre-commit hook refuses every commit (a commit then would delete the results
# from main). restore puts the index and .git/info/exclude back as they were.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
G=$(git rev-parse --git-dir); STATE="$G/evokernel-slim"; HOOK="$G/hooks/pre-commit"
die() { echo "device_tree: $*" >&2; exit 2; }

size() {
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r du -cb 2>/dev/null \
    | awk '$2 == "total" { s += $1 } END { printf "%d", s }'
}

case "${1:-}" in
  slim)
    shift; batch=1
    if [ "${1:-}" = --no-batch ]; then batch=0; shift; fi
    [ ! -e "$STATE" ] || die "already slimmed ($STATE); run restore first"
    [ "$#" -gt 0 ] || die "name the results/ paths to keep"
    for k in "$@"; do
      case "$k" in results/*) ;; *) die "$k: not a path under results/" ;; esac
      [ -e "$k" ] || die "$k: no such path"
    done
    [ ! -e "$HOOK" ] || die "$HOOK exists; slim installs its own pre-commit hook and will not replace it"
    mkdir -p "$STATE"; cp "$G/info/exclude" "$STATE/exclude" 2>/dev/null || : >"$STATE/exclude"
    drop=()
    for d in results/*/; do
      d=${d%/}; keep=0
      for k in "$@"; do case "$k/" in "$d/"*) keep=1 ;; esac; done
      [ "$keep" = 1 ] || drop+=("$d")
    done
    if [ "$batch" = 0 ]; then
      for k in "$@"; do while IFS= read -r b; do drop+=("$b"); done \
        < <(find "$k" -type d -name '*-batch' -prune); done
    fi
    mkdir -p "$(dirname "$HOOK")"
    printf '#!/bin/sh\necho "device_tree: the tree is slimmed for a device call; scripts/device_tree.sh restore first" >&2\nexit 1\n' >"$HOOK"
    chmod +x "$HOOK"
    for d in "${drop[@]}"; do
      git rm -r -q --cached --ignore-unmatch -- "$d"; echo "/$d/" >>"$G/info/exclude"
    done
    echo "device_tree: left out ${#drop[@]} folder(s); the tree is $(( $(size) / 1048576 )) MiB without carry" ;;
  restore)
    [ -d "$STATE" ] || die "not slimmed (no $STATE)"
    git reset -q -- results
    cp "$STATE/exclude" "$G/info/exclude"; rm -f "$HOOK"; rm -rf "$STATE"
    echo "device_tree: restored" ;;
  size)
    shift; total=$(size)
    for c in "$@"; do total=$(( total + $(du -sb "$c" | cut -f1) )); done
    echo "$(( total / 1048576 )) MiB (limit 64 MiB)" ;;
  *) sed -n 2,14p "$0"; exit 2 ;;
esac
