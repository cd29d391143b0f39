#!/usr/bin/env bash
# The system packages the test suite needs beyond the virtualenv, installed from Debian's archive
# (`make test` calls this before the tests; `.ci/run` through `make test`). A package already on the
# machine is skipped, so a second run does nothing. As root apt-get runs directly, otherwise through
# `sudo -n` (never a password prompt: where neither works the install fails with apt's own message).
# To add a package: one more `need COMMAND PACKAGE` line at the bottom.
set -euo pipefail

missing=()

# need COMMAND PACKAGE: PACKAGE is wanted unless COMMAND is already on the PATH.
need() {
    command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}

# The dashboard's browser test (tests/service/test_dashboard.py) drives Debian's Chromium through
# Playwright, which never downloads a browser here.
need chromium chromium

[ "${#missing[@]}" -eq 0 ] && exit 0
echo "installing system packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
    as_root=()
else
    as_root=(sudo -n)
fi
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
