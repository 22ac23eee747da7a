#!/usr/bin/env bash
# Set up everything hostbroker needs on Debian 12 (Python 3.11), then run it.
#   tools/run.sh serve [serve options]   the broker on its standalone default (data under ./data)
#   tools/run.sh test [pytest options]   the whole test suite
#   tools/run.sh setup                   only the set-up
# Idempotent: a second run reuses .venv unless pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
PY=$(command -v python3.11 || command -v python3 || true)
if [ -z "$PY" ]; then need_apt+=(python3 python3-venv); fi
if [ -n "$PY" ] && ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then need_apt+=(python3-venv); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
  PY=$(command -v python3.11 || command -v python3)
fi
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "hostbroker needs Python 3.11, found " + sys.version.split()[0])'

stamp=.venv/.hostbroker-installed
want=$(sha1sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 \
    | grep -v "^WARNING: Location" || true
  .venv/bin/python -c 'import hostbroker, posix_ipc, sysv_ipc, psutil, snappy, pytest, hypothesis'
  echo "$want" > "$stamp"
fi

cmd=${1:-serve}
shift || true
case "$cmd" in
  setup) ;;
  serve) exec .venv/bin/hostbroker serve "$@" ;;
  test)
    set +e
    .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
    rc=$?
    # pytest's 5 means it collected no test: that is a failure here, not a pass
    exit $rc ;;
  *) echo "usage: tools/run.sh serve|test|setup [options]" >&2; exit 2 ;;
esac
