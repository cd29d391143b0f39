#!/usr/bin/env bash
# After a failed `pytest -n N`: run the tests that failed once more, alone, one after another in one process.
# Many runtime, service and Slurm tests time real processes (Ray workers, Slurm daemons, torch imports); three
# workers on two cores can starve one past its waits. A test that fails again alone fails the run; so does a
# run with more than MAX_RERUN failures (a real regression is not retried) or one that recorded none (pytest
# itself broke). Usage: .ci/rerun-failed.sh PYTHON
set -uo pipefail
py="$1"
max="${MAX_RERUN:-4}"
failed=$("$py" - <<'PY'
import json, pathlib
p = pathlib.Path(".pytest_cache/v/cache/lastfailed")
print("\n".join(sorted(json.loads(p.read_text()))) if p.exists() else "")
PY
)
n=$(printf '%s' "$failed" | grep -c . || true)
if [ "$n" -eq 0 ] || [ "$n" -gt "$max" ]; then
  echo "== $n tests failed (at most $max are run again alone): the run fails" >&2
  exit 1
fi
echo "== $n test(s) failed beside the others; once more, alone (a test that fails again fails the run):"
printf '%s\n' "$failed"
exec "$py" -m pytest -q --last-failed --last-failed-no-failures none -n 0
