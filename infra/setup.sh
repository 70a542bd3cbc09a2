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
# runs on Java 17 or 21),
# Node.js/npm for the KafkaJS interop tests, venv support for the system Python, and iproute2
# and iptables for the two-datacenter topology in network namespaces (its network faults).
missing=()
need_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' || missing+=("$1"); }
need_pkg zookeeper
need_pkg kcat
need_pkg openjdk-17-jre-headless
need_pkg iproute2
need_pkg iptables
command -v node >/dev/null 2>&1 || need_pkg nodejs
command -v npm >/dev/null 2>&1 || need_pkg npm
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_pkg python3-venv

if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The tools virtualenv: nox drives every other environment from here.
if [ ! -x .venv/bin/nox ]; then
    log "creating .venv with nox"
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q 'nox>=2024.3'
fi

# KafkaJS for the interop tests, pinned by tests/interop/package-lock.json.
if [ ! -f tests/interop/node_modules/kafkajs/package.json ]; then
    log "installing KafkaJS into tests/interop/node_modules"
    (cd tests/interop && npm ci --no-audit --no-fund --silent)
fi
