# The Spark ETL host: gregor-spark (the gregor-etl job) on PySpark, with Java 17. It idles
# until a job is run in it (docker compose exec dc1-etl gregor-etl ...).
FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY packages /src/packages
RUN pip wheel --no-deps -w /wheels /src/packages/protocol \
    && pip install --no-cache-dir --find-links /wheels /src/packages/client /src/packages/spark
CMD ["sleep", "infinity"]
