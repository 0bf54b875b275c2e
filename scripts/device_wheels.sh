#!/usr/bin/env bash
# Fill .whl/ with what the H200's image lacks (deap, loguru, tenacity, litellm and their missing
# needs) and .whl-dask/ with dask, distributed and theirs, for the device tool's carry (64 MiB
# cap, tracked files included: carry .whl-dask only for the Dask stages, since with it the tree
# went over the cap on 2026-12-02). A fresh checkout has neither; run this once from the
# repository root before the first GPU call:
#
#   scripts/device_wheels.sh
#
# It needs network access to PyPI and the development machine's download helper,
# ../shared/tools/device-wheels.sh (it picks wheels for the GPU host's Python 3.12 and leaves out
# what that host's image already holds). litellm travels as .whl/litellm.tar.xz, its installed
# tree without litellm/proxy/_experimental (the proxy's web UI): its wheel alone is 42 MB;
# gpu_check.sh unpacks it into /tmp/site. Everything is made in a scratch copy first: .whl/ is
# replaced only when every download worked, so a failure leaves the old one as it was.
set -euo pipefail
[ -f scripts/gpu_check.sh ] || { echo "device_wheels: run it from the repository root" >&2; exit 2; }
tools=$(cd .. && pwd)/shared/tools/device-wheels.sh
[ -x "$tools" ] || { echo "device_wheels: $tools not found (the development machine's download helper)" >&2; exit 2; }
repo=$(pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo/.git/info" "$tmp/repo/scripts"   # the helper writes ./.whl and .git/info/exclude
fetch() {  # the helper, in the scratch copy; its output shown only when it fails
  if ! (cd "$tmp/repo" && "$tools" "$@") >"$tmp/log" 2>&1; then
    cat "$tmp/log" >&2; echo "device_wheels: downloading $* failed; .whl/ left as it was" >&2; exit 1
  fi
}
fetch dask distributed  # first, alone: every wheel it brings goes to .whl-dask/
mv "$tmp/repo/.whl" "$tmp/dask"
fetch deap loguru tenacity moocore cffi pycparser platformdirs
fetch litellm          # and litellm's needs that the image lacks, as wheels
ls "$tmp"/repo/.whl/litellm-*.whl >/dev/null 2>&1 \
  || { cat "$tmp/log" >&2; echo "device_wheels: no litellm wheel came; .whl/ left as it was" >&2; exit 1; }
mv "$tmp"/repo/.whl/litellm-*.whl "$tmp/"
mkdir "$tmp/tree" && python3 -m zipfile -e "$tmp"/litellm-*.whl "$tmp/tree"
rm -rf "$tmp/tree/litellm/proxy/_experimental"
tar cJf "$tmp/repo/.whl/litellm.tar.xz" -C "$tmp/tree" .
# One importlib_metadata (dask's and litellm's needs may pull two versions).
ls "$tmp"/repo/.whl/importlib_metadata-*.whl 2>/dev/null | sort -V | head -n -1 | xargs -r rm -f
rm -rf "$repo/.whl" "$repo/.whl-dask" && mv "$tmp/repo/.whl" "$repo/.whl" && mv "$tmp/dask" "$repo/.whl-dask"
ls .whl .whl-dask
echo "total: $(du -sm .whl | cut -f1) MiB in .whl/, $(du -sm .whl-dask | cut -f1) MiB in .whl-dask/"
