#!/usr/bin/env bash
# The hash of the code the tests run (16 hex digits): every file under evokernel, operators,
# problems, tests, scripts and experiments, and pyproject.toml, by path and content (caches and
# bytecode left out). The GPU tests' ledger keys passes by it (gpu_check.sh gpu-tests), so a
# commit of results or docs between two device calls, or a fresh copy of the same code on
# another machine, keeps what passed; any change to the code runs everything again.
#
#   scripts/code_hash.sh            (from the repository root; no git needed)
set -euo pipefail
cd "$(dirname "$0")/.."
find evokernel operators problems tests scripts experiments pyproject.toml -type f \
  ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*/.sandbox-test-*' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
