#!/usr/bin/env bash
# Prepares a Debian machine (Python 3.11) for Gregor: the system packages the tests and the
# local cluster need, and a tools virtualenv (.venv) holding nox. Idempotent: anything that is
# already there is left alone, so running it again costs a few checks.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian packages: ZooKeeper (the coordination service the brokers use), kcat (a librdkafka
# command-line client the interop tests drive), Java 17 for ZooKeeper and Spark (PySpark 4
# runs on Java 17 or 21), Node.js/npm for the KafkaJS interop tests, and iproute2 and
# iptables for the two-datacenter topology in network namespaces (its network faults).
missing=()
need_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' || missing+=("$1"); }

# The interpreter every environment is made from: Debian's own python3.11 where there is one,
# since Debian builds it with profile-guided and link-time optimisation. A build without
# them (pyenv's default, first on PATH on some machines) costs the brokers about a fifth
# more CPU a request (docs/performance.md, "The interpreter"). GREGOR_PYTHON names another.
if [ -n "${GREGOR_PYTHON:-}" ]; then
    python=$GREGOR_PYTHON
elif [ -x /usr/bin/python3.11 ]; then
    python=/usr/bin/python3.11
else
    python=$(command -v python3)
fi
if [ "${python#/usr/bin/python3.}" != "$python" ]; then
    # Debian's venv module, and the headers the C extensions compile against (without them
    # the packages install in pure Python, several times slower).
    need_pkg "${python#/usr/bin/}-venv"
    need_pkg "${python#/usr/bin/}-dev"
fi
command -v gcc >/dev/null 2>&1 || need_pkg gcc
need_pkg zookeeper
need_pkg kcat
need_pkg openjdk-17-jre-headless
need_pkg iproute2
need_pkg iptables
command -v node >/dev/null 2>&1 || need_pkg nodejs
command -v npm >/dev/null 2>&1 || need_pkg npm

if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The tools virtualenv: nox drives every other environment from here, and nox makes them
# from its own interpreter. Made from another interpreter before, both are made again (nox
# would reuse its environments as they are).
which_python='import sys; print(sys.base_prefix, sys.version)'
if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c "$which_python")" != "$("$python" -c "$which_python")" ]; then
    log "making .venv and .nox again, from $python"
    rm -rf .venv .nox
fi
if [ ! -x .venv/bin/nox ]; then
    log "creating .venv with nox, from $python"
    "$python" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q 'nox>=2024.3'
fi

# KafkaJS for the interop tests, pinned by tests/interop/package-lock.json.
if [ ! -f tests/interop/node_modules/kafkajs/package.json ]; then
    log "installing KafkaJS into tests/interop/node_modules"
    (cd tests/interop && npm ci --no-audit --no-fund --silent)
fi
