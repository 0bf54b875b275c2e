#!/usr/bin/env bash
# Fill .whl/ with what the H200's image lacks (deap, loguru, tenacity, dask, distributed, litellm
# and their missing needs), for the device tool's carry (64 MiB cap). A fresh checkout has no
# .whl/; run this once from the repository root before the first GPU call:
#
#   scripts/device_wheels.sh
#
# litellm travels as .whl/litellm.tar.xz, its installed tree without litellm/proxy/_experimental
# (the proxy's web UI): its wheel alone is 42 MB; gpu_check.sh unpacks it into /tmp/site.
set -euo pipefail
[ -f scripts/gpu_check.sh ] || { echo "device_wheels: run it from the repository root" >&2; exit 2; }
tools=../shared/tools/device-wheels.sh
[ -x "$tools" ] || { echo "device_wheels: $tools not found" >&2; exit 2; }
rm -rf .whl
"$tools" deap loguru tenacity moocore cffi pycparser platformdirs dask distributed >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$tools" litellm >/dev/null   # litellm's needs that the image lacks, as wheels
mv .whl/litellm-*.whl "$tmp/"
mkdir "$tmp/tree" && python3 -m zipfile -e "$tmp"/litellm-*.whl "$tmp/tree"
rm -rf "$tmp/tree/litellm/proxy/_experimental"
tar cJf .whl/litellm.tar.xz -C "$tmp/tree" .
# One importlib_metadata (dask's and litellm's needs may pull two versions).
ls .whl/importlib_metadata-*.whl 2>/dev/null | sort -V | head -n -1 | xargs -r rm -f
ls .whl; echo "total: $(du -sm .whl | cut -f1) MiB in .whl/"
