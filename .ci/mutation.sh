#!/usr/bin/env bash
# Mutation testing with cosmic-ray (docs/mutation.md): bash .ci/mutation.sh [--list] [MODULE ...]
# Needs a Python with envbuild's test dependencies and cosmic-ray (the `test` extra); MUTATION_PYTHON picks it.
# Not part of .ci/run: every module takes minutes, all of them hours on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${MUTATION_PYTHON:-python}" .ci/mutation.py "$@"
