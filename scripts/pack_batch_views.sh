#!/usr/bin/env bash
# Pack a batch folder's derived files into BATCH/views.tar.xz, for the record: the request views
# (requests/*.md, what each answering agent read) and the Batch API input files (*.jsonl). Both
# repeat requests/*.json, so git ignores them loose (.gitignore); packed they take about a tenth
# of the space, and a device call's tree (tracked files + carry) stays under its 64 MiB limit.
# Re-packing keeps what the archive held (a fresh clone has the views only there) and adds or
# replaces the views present loose now.
#
#   scripts/pack_batch_views.sh BATCH_DIR [BATCH_DIR ...]
#   tar xJf BATCH_DIR/views.tar.xz -C BATCH_DIR        (unpack)
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/pack_batch_views.sh BATCH_DIR [BATCH_DIR ...]" >&2; exit 2; }
for b in "$@"; do
  [ -d "$b/requests" ] || { echo "pack_batch_views: $b: not a batch folder (no requests/)" >&2; exit 2; }
  files=$(cd "$b" && { ls requests/*.md 2>/dev/null; ls ./*.jsonl 2>/dev/null; } | sed 's#^\./##' || true)
  if [ -z "$files" ]; then echo "pack_batch_views: $b: no views to pack"; continue; fi
  tmp=$(mktemp -d)
  [ -f "$b/views.tar.xz" ] && tar xJf "$b/views.tar.xz" -C "$tmp"   # what was packed before
  mkdir -p "$tmp/requests"
  # shellcheck disable=SC2086
  (cd "$b" && cp --parents $files "$tmp/")                           # loose views win
  all=$(cd "$tmp" && { ls requests/*.md 2>/dev/null; ls ./*.jsonl 2>/dev/null; } | sed 's#^\./##' || true)
  # shellcheck disable=SC2086
  (cd "$tmp" && tar cJf views.tar.xz $all) && mv "$tmp/views.tar.xz" "$b/views.tar.xz"
  rm -rf "$tmp"
  echo "pack_batch_views: $b/views.tar.xz: $(wc -l <<<"$all") files ($(wc -l <<<"$files") loose), $(du -h "$b/views.tar.xz" | cut -f1)"
done
