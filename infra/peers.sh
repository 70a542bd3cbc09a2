#!/usr/bin/env bash
# Installs the messaging systems bench/bench_peers.py compares Gregor with, from Debian:
# RabbitMQ, ActiveMQ and NATS (JetStream is built into nats-server). Only the benchmark
# needs them (nox -s bench_peers runs this first); the tests and CI never do. Idempotent.
#
# The benchmark starts each one itself, as its own process with its data in a temporary
# directory on free ports, so no system service may be left running: the packages'
# maintainer scripts are kept from starting theirs (policy-rc.d answers 101, "not allowed",
# while apt runs), and any that a service manager started anyway is stopped and disabled.
set -euo pipefail

log() { printf 'peers: %s\n' "$*" >&2; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

packages=(rabbitmq-server activemq nats-server)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
    own_policy=1
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    trap 'as_root rm -f "$policy"' EXIT
fi
log "installing Debian packages: ${missing[*]}"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    as_root systemctl disable --now rabbitmq-server activemq nats-server epmd.socket epmd \
        >/dev/null 2>&1 || true
fi
