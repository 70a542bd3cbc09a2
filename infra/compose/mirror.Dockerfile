# gregor-mirror, built from this checkout; the compose file mounts its mm2.properties at
# /etc/gregor/mm2.properties and names the cluster it writes into (its own datacenter's).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY packages /src/packages
RUN pip wheel --no-deps -w /wheels /src/packages/protocol \
    && pip install --no-cache-dir --find-links /wheels \
        /src/packages/storage /src/packages/client /src/packages/mirror
CMD ["gregor-mirror", "/etc/gregor/mm2.properties"]
