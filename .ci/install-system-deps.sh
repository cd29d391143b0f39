#!/usr/bin/env bash
# The system packages the test suite needs beyond the virtualenv, installed from Debian's archive
# (`make test` calls this before the tests; `.ci/run` through `make test`). A package already on the
# machine is skipped, so a second run does nothing. As root apt-get runs directly, otherwise through
# `sudo -n` (never a password prompt); where neither works it says what to install and fails.
# To add a package: one more `need COMMAND PACKAGE` line at the bottom.
set -euo pipefail

missing=()

# need COMMAND PACKAGE: PACKAGE is wanted unless COMMAND (a name on the PATH, or a path) is executable.
need() {
    command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}

# The dashboard's browser test (tests/service/test_dashboard.py) drives Debian's Chromium through
# Playwright, which never downloads a browser here: the test's binary (HADAR_CHROMIUM, by default the
# package's /usr/bin/chromium).
need "${HADAR_CHROMIUM:-/usr/bin/chromium}" chromium

[ "${#missing[@]}" -eq 0 ] && exit 0
echo "installing system packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "cannot install ${missing[*]}: not root and no password-less sudo; install them, then run again" >&2
    exit 1
fi
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
