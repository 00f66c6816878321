#!/usr/bin/env bash
# Idempotent set-up shared by scripts/demo and scripts/test: a venv in .venv with the pinned
# Python packages, Kafka's broker jars from Maven Central, and the JVM shim jar.
# The second run only checks stamps and takes a second or two.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.venv"
py=${PYTHON:-python3.11}
command -v "$py" >/dev/null 2>&1 || py=python3

need() { command -v "$1" >/dev/null 2>&1 || { echo "bootstrap: '$1' is required ($2)" >&2; exit 1; }; }
need "$py" "Python 3.11+"
need java "Java 17+ runs the local Kafka broker and Spark"
need mvn "Maven fetches Kafka's jars from Maven Central and builds the JVM shim"
"$py" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
  || { echo "bootstrap: Python 3.11+ is required" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv"
  "$py" -m venv "$venv"
fi
stamp="$venv/.orderedstream-installed"
# The native Kafka reader (native/: Rust, pyo3, librdkafka vendored by rdkafka-sys) is built by
# the same install (setuptools-rust). Cargo's target folder lives under ~/.cache/orderedstream,
# shared by every clone on this machine and by the wheel build of tests/test_architecture.py,
# so only the first build compiles librdkafka (minutes) and later ones take seconds.
# ORDEREDSTREAM_CARGO_TARGET_DIR overrides it.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/orderedstream"
# rustup installs cargo in ~/.cargo/bin, which a non-login shell (CI) may not have on PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
export CARGO_TARGET_DIR="${ORDEREDSTREAM_CARGO_TARGET_DIR:-$cache/cargo-target}"
# An editable install in setuptools' strict mode: a tree of links to the package files, which
# Spark's pkgutil-based Data Source discovery sees like any site-packages folder. A file added
# or removed needs a new link tree, so the stamp covers the list of package files too; the
# native crate's sources are covered by content.
want=$( { cat pyproject.toml constraints.txt;
          find src python_datasource statestore sinks -type f \( -name '*.py' -o -name py.typed \
               -o -path '*/resources/*' \) | LC_ALL=C sort;
          find native -type f \( -name '*.rs' -o -name 'Cargo.*' \) | LC_ALL=C sort | xargs cat;
          command -v cargo || true; } | sha256sum | cut -c1-16)
# pip's and setuptools' own output (the editable-install banner included) goes to a log file,
# shown only when a step fails.
pip_log="$venv/bootstrap-pip.log"
quietly() {  # quietly LOG COMMAND...: run, output to LOG; on failure show its tail
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "bootstrap: FAILED: $* (last lines of $log):" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  started=$SECONDS
  echo "bootstrap: installing Python packages pinned by constraints.txt into $venv" \
       "(a few minutes the first time; log: $pip_log)"
  quietly "$pip_log" "$venv/bin/python" -m pip install -q --upgrade pip
  if command -v cargo >/dev/null 2>&1; then
    if [ -d "$CARGO_TARGET_DIR/release/build" ] && ls "$CARGO_TARGET_DIR"/release/build | grep -q '^rdkafka-sys-'; then
      echo "bootstrap: building the native Kafka reader (cached: seconds)"
    else
      echo "bootstrap: building the native Kafka reader (first time: several minutes)"
    fi
  fi
  quietly "$pip_log" "$venv/bin/python" -m pip install -q -c constraints.txt -e ".[test,bench,dev]" \
    --config-settings editable_mode=strict
  echo "$want" > "$stamp"
  echo "bootstrap: Python packages installed in $((SECONDS - started))s"
fi
# The package's bytecode, compiled once here (seconds; only changed files later). pip compiles
# the packages it installs, not an editable install's files, and where PYTHONDONTWRITEBYTECODE
# is set (container images often set it) no process writes them either: every driver, source
# runner, planner and Spark worker then compiled the pack's modules again when importing them,
# about 0.18 s of CPU per process here. Written .pyc files are read with that setting too.
if "$venv/bin/python" - <<'PY'
import compileall, glob, os, sys
import orderedstream
ok = compileall.compile_dir(os.path.dirname(orderedstream.__file__), quiet=1, workers=0)
# the pyspark_* registrations beside it: Spark's Data Source lookup imports them
top = os.path.dirname(os.path.dirname(orderedstream.__file__))
for path in glob.glob(os.path.join(top, "pyspark_*.py")):
    ok = compileall.compile_file(path, quiet=1) and ok
sys.exit(0 if ok else 1)
PY
then :; else echo "bootstrap: WARNING: some of the package's modules did not compile (above)" >&2; fi
# The native reader is optional for installing (without cargo the pure-Python reader runs), not
# for the tests: its tests fail, never skip, when it is missing. Say so loudly here.
if ! "$venv/bin/python" -c "import orderedstream._kafka_native" 2>/dev/null; then
  echo "bootstrap: WARNING: the native Kafka reader (orderedstream._kafka_native) is not" \
       "built; reading falls back to confluent-kafka and the native reader's tests will" \
       "fail. It needs cargo (Rust), a C compiler and libssl-dev; to see why, run:" \
       "CARGO_TARGET_DIR=$CARGO_TARGET_DIR $venv/bin/pip install -v -e . --no-deps" \
       "--config-settings editable_mode=strict" >&2
fi

# Kafka's broker jars (cached in ~/.cache/orderedstream; a marker makes this free next time).
if ! "$venv/bin/python" -c "import sys; from orderedstream.dev.services.jars import cache_root, \
KAFKA_VERSION as v; sys.exit(0 if (cache_root() / f'kafka-{v}' / '.complete').exists() else 1)" \
    2>/dev/null; then
  echo "bootstrap: downloading Kafka's broker jars from Maven Central (once, ~100 MB)"
fi
"$venv/bin/python" -c "from orderedstream.dev.services.jars import kafka_broker_classpath as k; k()"

# Azurite, the Azure Blob Storage emulator the tests start (npm package, pinned in
# orderedstream.dev.services.azurite), into ~/.cache/orderedstream/azurite-<version> once.
# It needs Node.js; without node/npm the Azure tests fail (never skip), so say so here.
if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
  if ! "$venv/bin/python" -c "import sys; from orderedstream.dev.services.azurite import \
install_dir; sys.exit(0 if (install_dir() / 'node_modules/.bin/azurite-blob').exists() else 1)" \
      2>/dev/null; then
    echo "bootstrap: installing Azurite (the Azure Storage emulator) from npm (once)"
  fi
  "$venv/bin/python" -m orderedstream.dev.services.azurite >/dev/null
else
  echo "bootstrap: WARNING: node and npm are not installed: the Azure Blob tests (Azurite)" \
       "will fail. Install them (Debian: apt-get install nodejs npm) and run this again" >&2
fi

# The JVM shim: rebuilt only when its sources changed.
# Without the jar the pack still works (state restores from snapshots more often), so a failed
# build is reported, not fatal; the shim's own tests fail loudly in that case.
if [ -f jvm-shim/pom.xml ]; then
  "$venv/bin/python" -m orderedstream.dev.shim build --quiet --announce \
    || echo "bootstrap: WARNING: the JVM shim did not build; running without executor-sticky placement" >&2
fi

# The main job's driver JVM class archive (AppCDS, orderedstream.dev.services.jvmarchive):
# built once per pyspark and Java under ~/.cache/orderedstream/jvm; with it `orderedstream run`
# starts its JVM about 1.5 s sooner with about 2 s less CPU. Not fatal: without it the JVM
# loads its classes as usual.
"$venv/bin/python" -m orderedstream.dev.services.jvmarchive --announce \
  || echo "bootstrap: WARNING: the JVM class archive was not built; the job starts without it" >&2
