# A gregor-broker, built from this checkout as README.md's "Installing the packages" says:
# gregor-protocol's wheel first (the others compile against its header). The compose file
# mounts its server.properties at /etc/gregor/server.properties and gives it the command.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY packages /src/packages
RUN pip wheel --no-deps -w /wheels /src/packages/protocol \
    && pip install --no-cache-dir --find-links /wheels \
        /src/packages/storage /src/packages/client /src/packages/broker
CMD ["gregor-broker", "/etc/gregor/server.properties"]
