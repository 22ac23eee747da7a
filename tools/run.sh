#!/usr/bin/env bash
# Set up everything hostbroker needs on Debian 12, then run it.
#   tools/run.sh serve [serve options]   the broker on its standalone default (data under ./data)
#   tools/run.sh test                    the whole suite on Python 3.11 (.venv), then a quick
#                                        pass on each other supported Python found (.venv-3.X),
#                                        each on HB_TEST_JOBS pytest-xdist workers (default 3;
#                                        0 runs in one process)
#   tools/run.sh test [pytest options]   only those tests, only on 3.11, in one process
#                                        (add -n 3 for workers)
#   tools/run.sh setup                   only the set-up
# Python 3.11 is required; 3.12 and 3.13 are supported and tested when the machine has
# them (python3.X on PATH, or a pyenv version); one that is missing is said in one line.
# Idempotent: a second run reuses each venv unless pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRA_VERSIONS=(3.12 3.13)
QUICK_TESTS=(tests/protocol tests/log tests/shm tests/test_config.py
             tests/integration/test_api.py tests/integration/test_refusals.py
             tests/integration/test_systemd.py tests/integration/test_supervision.py
             tests/spark/test_options.py)
# Most tests wait (brokers, ZooKeeper, Spark) more than they compute, so test files run
# side by side even on two cores; tests/conftest.py groups them for the workers.
PARALLEL=(-n "${HB_TEST_JOBS:-3}" --dist loadgroup)
# These assert answers, heartbeats, retries or two processes overlapping within tight
# times under their own load, (test_wire) count a broker's connections exactly, or
# (test_cpu_latency) hold the machine-wide CPU wake-up latency request:
# they run afterwards, alone, in one process.
RUN_ALONE=(tests/hostile tests/integration/test_supervision.py tests/cluster/test_producer_zk.py
           tests/shm/test_table.py tests/shm/test_waker.py tests/integration/test_wire.py
           tests/integration/test_cpu_latency.py)

# A working interpreter of version $1 (pyenv shims exist for versions not selected: run it).
find_python() {
  local v=$1 cand root
  for cand in "$(command -v "python$v" || true)" \
              $(root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
                ls -d "$root"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V -r); do
    if [ -n "$cand" ] && "$cand" -c "import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  return 1
}

# Make or refresh the venv $2 with interpreter $1 and the extras $3 (default test).
make_venv() {
  local py=$1 venv=$2 extras=${3:-test} stamp=$2/.hostbroker-installed want
  want="$(sha1sum pyproject.toml | cut -d' ' -f1) $extras"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]" 2>&1 \
      | grep -v "^WARNING: Location" || true
    "$venv/bin/python" -c 'import hostbroker, posix_ipc, sysv_ipc, psutil, snappy, pytest, hypothesis, xdist'
    if [[ $extras == *spark* ]]; then "$venv/bin/python" -c 'import pyspark, pyarrow'; fi
    echo "$want" > "$stamp"
  fi
}

# run_tests VENV [PATH...]: the paths (default the whole suite) on the workers, but for
# RUN_ALONE, whose given paths then run in one process.
run_tests() {
  local venv=$1 rc=0 path given ignore=() alone=()
  shift
  for path in "${RUN_ALONE[@]}"; do
    ignore+=("--ignore=$path")
    for given in "${@:-tests}"; do
      if [ "$path" = "$given" ] || [[ $path == "${given%/}"/* ]]; then alone+=("$path"); break; fi
    done
  done
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${PARALLEL[@]}" "${ignore[@]}" "$@" || rc=1
  if [ ${#alone[@]} -gt 0 ]; then
    echo "tools/run.sh: run alone: ${alone[*]}"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${alone[@]}" || rc=1
  fi
  return $rc
}

need_apt=()
PY=$(find_python 3.11 || command -v python3 || true)
if [ -z "$PY" ]; then need_apt+=(python3 python3-venv); fi
if [ -n "$PY" ] && ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then need_apt+=(python3-venv); fi
# the service tests check the unit with systemd-analyze, systemd-sysusers and systemd-tmpfiles
if ! command -v systemd-analyze >/dev/null; then need_apt+=(systemd); fi
# Spark (the data source, `hostbroker load` and their tests) runs on a Java 17 runtime
if ! java -version 2>&1 | grep -q 'version "\(1[7-9]\|2[0-9]\)'; then need_apt+=(openjdk-17-jre-headless); fi
# cluster-mode tests start a real ZooKeeper (ZooKeeperServerMain from Debian's package)
if [ ! -f /usr/share/java/zookeeper.jar ]; then need_apt+=(zookeeper); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
  PY=$(find_python 3.11 || command -v python3)
fi
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "hostbroker needs Python 3.11, found " + sys.version.split()[0])'
make_venv "$PY" .venv test,spark

cmd=${1:-serve}
shift || true
case "$cmd" in
  setup) ;;
  serve) exec .venv/bin/hostbroker serve "$@" ;;
  test)
    set +e
    if [ $# -gt 0 ]; then
      # pytest's 5 means it collected no test: that is a failure here, not a pass
      .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
      exit $?
    fi
    run_tests .venv
    rc=$?
    for v in "${EXTRA_VERSIONS[@]}"; do
      if ! py=$(find_python "$v"); then
        echo "tools/run.sh: Python $v not found on this machine; its quick pass is skipped"
        continue
      fi
      echo "tools/run.sh: quick pass on Python $v ($py)"
      if ! (set -e; make_venv "$py" ".venv-$v"); then
        echo "tools/run.sh: cannot install hostbroker on Python $v" >&2
        rc=1; continue
      fi
      run_tests ".venv-$v" "${QUICK_TESTS[@]}" || rc=1
    done
    exit $rc ;;
  *) echo "usage: tools/run.sh serve|test|setup [options]" >&2; exit 2 ;;
esac
