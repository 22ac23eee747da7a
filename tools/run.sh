#!/usr/bin/env bash
# Set up everything hostbroker needs on Debian 12, then run it.
#   tools/run.sh serve [serve options]   the broker on its standalone default (data under ./data)
#   tools/run.sh test                    the whole suite on Python 3.11 (.venv), then a quick
#                                        pass on each other supported Python found (.venv-3.X);
#                                        the suite on HB_TEST_JOBS pytest-xdist workers
#                                        (default 6; 0 runs in one process)
#   tools/run.sh test [pytest options]   only those tests, only on 3.11, in one process
#                                        (add -n 6 for workers)
#   tools/run.sh setup                   only the set-up
#   tools/run.sh zookeeper [--port N] [--data-dir DIR]
#                                        a standalone ZooKeeper for cluster mode, in the
#                                        foreground (Debian's package; on 127.0.0.1:2181,
#                                        data under ./data/zookeeper unless given; Ctrl-C stops it)
# Python 3.11 is required; 3.12 and 3.13 are supported and tested when the machine has
# them (python3.X on PATH, or a pyenv version); one that is missing is said in one line.
# Idempotent: a second run reuses each venv unless pyproject.toml changed, and says nothing
# about the set-up; a step that has work to do says so in one line on stderr first.
set -euo pipefail
caller_dir=$PWD  # options naming paths are relative to where run.sh was started
cd "$(dirname "$0")/.."

say() { echo "tools/run.sh: $*" >&2; }

EXTRA_VERSIONS=(3.12 3.13)
# The quick pass on each other Python: what touches the interpreter and its libraries most
# (codecs, files, shared memory, the configuration) and a broker end to end. Supervision
# (SIGSTOPped workers replaced) is the same code on every version and runs on 3.11 only.
QUICK_TESTS=(tests/protocol tests/log tests/shm tests/test_config.py
             tests/integration/test_api.py tests/integration/test_refusals.py
             tests/integration/test_systemd.py tests/spark/test_options.py)
# Most tests wait (brokers, ZooKeeper, Spark) more than they compute, so test files run
# side by side, six at once even on two cores (docs/testing.md, "Where the time goes");
# tests/conftest.py groups them for the workers.
JOBS=${HB_TEST_JOBS:-6}
# The quick passes run side by side after the whole suite, each on this many workers, at
# the niceness QUICK_NICE (below)
QUICK_JOBS=2
# These assert answers, heartbeats, retries or two processes overlapping within tight
# times under their own load (workers SIGSTOPped and replaced, produces timed beside the
# largest joins, a producer's retries while its broker leaves, a 70 MB commit and a 2 GiB
# fetch answered within the exchange deadline), (test_wire) count a broker's connections
# exactly, or (test_cpu_latency) hold the machine-wide CPU wake-up latency request, or
# (test_leases, hostile/test_files) leave dead broker runs that any broker starting
# meanwhile would sweep first: they run afterwards, alone, in one process. The rest of
# tests/hostile runs on the workers: its bounds (a normal client answered within 2 s,
# each exchange within 10 s) hold beside the other tests.
RUN_ALONE=(tests/integration/test_supervision.py tests/hostile/test_supervision.py
           tests/hostile/test_coordinator_isolation.py tests/hostile/test_oversized.py
           tests/hostile/test_files.py tests/shm/test_leases.py tests/cluster/test_producer_zk.py
           tests/shm/test_table.py tests/shm/test_waker.py tests/integration/test_wire.py
           tests/integration/test_cpu_latency.py)
# Of those, the ones no other test process may run beside at all: the quick passes'
# brokers would sweep their dead broker runs, or hold the CPU latency request. The
# others run beside the quick passes' workers, which get the lowest priority.
RUN_QUIET=(tests/hostile/test_files.py tests/shm/test_leases.py
           tests/integration/test_cpu_latency.py)
QUICK_NICE=19

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
    if [ ! -x "$venv/bin/python" ]; then say "making the venv $venv ($py)"; fi
    "$py" -m venv "$venv"
    say "pip: installing hostbroker[$extras] and its dependencies into $venv" \
        "(a minute or two on a fresh machine)"
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]" \
         > "$venv/pip.log" 2>&1; then
      grep -v "^WARNING: Location" "$venv/pip.log" >&2 || true
      say "pip could not install hostbroker[$extras] into $venv (its output above, and in $venv/pip.log)"
      return 1
    fi
    "$venv/bin/python" -c 'import hostbroker, posix_ipc, sysv_ipc, psutil, snappy, pytest, hypothesis, xdist'
    if [[ $extras == *spark* ]]; then "$venv/bin/python" -c 'import pyspark, pyarrow'; fi
    if [[ $extras == *bench* ]]; then "$venv/bin/python" -c 'import matplotlib'; fi
    echo "$want" > "$stamp"
  fi
}

# alone_of PATH...: the RUN_ALONE modules among the paths (default the whole suite)
alone_of() {
  local path given
  for path in "${RUN_ALONE[@]}"; do
    for given in "${@:-tests}"; do
      if [ "$path" = "$given" ] || [[ $path == "${given%/}"/* ]]; then echo "$path"; break; fi
    done
  done
}

is_quiet() {
  local quiet
  for quiet in "${RUN_QUIET[@]}"; do
    if [ "$quiet" = "$1" ]; then echo yes; return; fi
  done
  echo no
}

# run_workers VENV JOBS [PATH...]: the paths (default the whole suite) but RUN_ALONE, on
# JOBS pytest-xdist workers (0: in one process)
run_workers() {
  local venv=$1 jobs=$2 path ignore=()
  shift 2
  for path in "${RUN_ALONE[@]}"; do ignore+=("--ignore=$path"); done
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$jobs" --dist loadgroup \
    "${ignore[@]}" "$@"
}

# run_alone VENV all|loud|quiet [PATH...]: the RUN_ALONE modules among the paths (all,
# those but RUN_QUIET, or those of RUN_QUIET), in one process
run_alone() {
  local venv=$1 which=$2 alone=() path
  shift 2
  for path in $(alone_of "$@"); do
    case "$which:$(is_quiet "$path")" in
      all:*|loud:no|quiet:yes) alone+=("$path") ;;
    esac
  done
  if [ ${#alone[@]} -eq 0 ]; then return 0; fi
  echo "tools/run.sh: run alone on $("$venv/bin/python" -c 'import sys; print("Python %d.%d" % sys.version_info[:2])'): ${alone[*]}"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${alone[@]}"
}

# need PACKAGE WHY: one Debian package to install, and what it is for (said when installing)
need_apt=()
need_why=()
need() { need_apt+=("$1"); need_why+=("$1 ($2)"); }

install_apt() {
  if [ ${#need_apt[@]} -eq 0 ]; then return 0; fi
  local list
  list=$(printf '%s, ' "${need_why[@]}")
  say "apt: installing ${list%, } (apt-get update, then install; a minute or more)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
  need_apt=()
  need_why=()
}

# Spark (the data source, `hostbroker load` and their tests) and ZooKeeper run on Java 17
need_java() {
  if ! java -version 2>&1 | grep -q 'version "\(1[7-9]\|2[0-9]\)'; then
    need openjdk-17-jre-headless "Java 17 for Spark and ZooKeeper"
  fi
}
# cluster mode and its tests run a real ZooKeeper (ZooKeeperServerMain from Debian's package)
need_zookeeper() {
  if [ ! -f "$ZK_JAVA_DIR/zookeeper.jar" ]; then need zookeeper "a ZooKeeper server for cluster mode"; fi
}
ZK_JAVA_DIR=/usr/share/java
ZK_JARS=(zookeeper.jar zookeeper-jute.jar slf4j-api.jar slf4j-simple.jar)
# the console's tests (tests/console) drive Debian's chromium through its WebDriver; only
# the test command installs them (a broker does not need a browser)
need_chromium() {
  if [ ! -x /usr/bin/chromium ]; then need chromium "a headless browser for the console's tests"; fi
  if [ ! -x /usr/bin/chromedriver ]; then need chromium-driver "its WebDriver, for the same tests"; fi
}
# the access control tests (tests/tls, tests/access) make certificates with openssl and
# users with useradd / run clients as them with setpriv (passwd and util-linux: always there)
need_test_tools() {
  if ! command -v openssl >/dev/null; then need openssl "certificates for the TLS tests"; fi
}

# run_zookeeper [--port N] [--data-dir DIR]: a standalone ZooKeeper in the foreground, as
# the cluster tests run it (tests/cluster/zkserver.py), on loopback, with a zoo.cfg written
# into its data dir. Debian's zkServer.sh expects a set-up of /etc/zookeeper it lacks.
run_zookeeper() {
  local port=2181 data=./data/zookeeper jar classpath=
  while [ $# -gt 0 ]; do
    case "$1" in
      --port) port=${2:?--port needs a number}; shift 2 ;;
      --data-dir) data=${2:?--data-dir needs a directory}; shift 2
                  if [[ $data != /* ]]; then data=$caller_dir/$data; fi ;;
      *) echo "tools/run.sh zookeeper: unknown option $1 (--port N, --data-dir DIR)" >&2
         exit 2 ;;
    esac
  done
  if ! [[ $port =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
    echo "tools/run.sh zookeeper: --port must be 1 to 65535, got $port" >&2; exit 2
  fi
  need_java
  need_zookeeper
  install_apt
  mkdir -p "$data"
  data=$(cd "$data" && pwd)
  cat > "$data/zoo.cfg" <<CFG
tickTime=2000
dataDir=$data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
CFG
  for jar in "${ZK_JARS[@]}"; do classpath+="${classpath:+:}$ZK_JAVA_DIR/$jar"; done
  say "ZooKeeper on 127.0.0.1:$port, data in $data (zookeeper.connect=127.0.0.1:$port)"
  exec java -Xmx256m -cp "$classpath" org.apache.zookeeper.server.ZooKeeperServerMain \
    "$data/zoo.cfg"
}

if [ "${1:-}" = zookeeper ]; then
  shift
  run_zookeeper "$@"
fi

PY=$(find_python 3.11 || command -v python3 || true)
if [ -z "$PY" ]; then need python3 "Python 3"; need python3-venv "its venv module"; fi
if [ -n "$PY" ] && ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  need python3-venv "Python's venv module"
fi
# the service tests check the unit with systemd-analyze, systemd-sysusers and systemd-tmpfiles
if ! command -v systemd-analyze >/dev/null; then need systemd "systemd-analyze for the unit's tests"; fi
need_java
need_zookeeper
if [ ${#need_apt[@]} -gt 0 ]; then
  install_apt
  PY=$(find_python 3.11 || command -v python3)
fi
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "hostbroker needs Python 3.11, found " + sys.version.split()[0])'
make_venv "$PY" .venv test,spark,bench

cmd=${1:-serve}
shift || true
case "$cmd" in
  setup) ;;
  serve) exec .venv/bin/hostbroker serve "$@" ;;
  test)
    need_chromium
    need_test_tools
    install_apt
    set +e
    # Every broker, tool and Spark run a test starts is a fresh interpreter importing the
    # tree: without compiled files (PYTHONDONTWRITEBYTECODE, as some shells set) each one
    # compiles it again, about 0.4 s of CPU a start and a fifth of the suite's. They are
    # kept outside the tree, under the venv, whatever the environment says.
    export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
    unset PYTHONDONTWRITEBYTECODE
    if [ $# -gt 0 ]; then
      # pytest's 5 means it collected no test: that is a failure here, not a pass
      .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
      exit $?
    fi
    # The whole suite on 3.11. Then the quick passes on the other Pythons (their venvs made
    # first: a pip install, once), their workers' part side by side and at the lowest
    # priority, beside 3.11's RUN_ALONE modules but RUN_QUIET: those leave a core idle much
    # of the time, and take it back at once when they want it. Then, with nothing else
    # running, RUN_QUIET, and each quick pass's RUN_ALONE modules.
    rc=0
    run_workers .venv "$JOBS" || rc=1
    quick=()
    for v in "${EXTRA_VERSIONS[@]}"; do
      if ! py=$(find_python "$v"); then
        echo "tools/run.sh: Python $v not found on this machine; its quick pass is skipped"
        continue
      fi
      if ! (set -e; make_venv "$py" ".venv-$v"); then
        echo "tools/run.sh: cannot install hostbroker on Python $v" >&2
        rc=1; continue
      fi
      quick+=("$v")
    done
    beside=$(mktemp -d)
    trap 'rm -rf "$beside"' EXIT
    pids=()
    for v in "${quick[@]}"; do
      (renice -n "$QUICK_NICE" "$BASHPID" >/dev/null
       run_workers ".venv-$v" "$QUICK_JOBS" "${QUICK_TESTS[@]}") > "$beside/$v.log" 2>&1 &
      pids+=($!)
    done
    run_alone .venv loud || rc=1
    for i in "${!quick[@]}"; do
      wait "${pids[$i]}" || rc=1
      echo "tools/run.sh: quick pass on Python ${quick[$i]} (.venv-${quick[$i]}):"
      cat "$beside/${quick[$i]}.log"
    done
    run_alone .venv quiet || rc=1
    for v in "${quick[@]}"; do
      run_alone ".venv-$v" all "${QUICK_TESTS[@]}" || rc=1
    done
    exit $rc ;;
  *) echo "usage: tools/run.sh serve|test|setup|zookeeper [options]" >&2; exit 2 ;;
esac
