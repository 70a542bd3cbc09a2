# The Spark ETL host: gregor-spark (gregor-etl) on PySpark, with Java 17. The compose file
# runs gregor-etl as a service in it (--every), loading its datacenter's topics into the
# warehouse on its volume; without a command it idles.
FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY packages /src/packages
RUN pip wheel --no-deps -w /wheels /src/packages/protocol \
    && pip install --no-cache-dir --find-links /wheels /src/packages/client /src/packages/spark
CMD ["sleep", "infinity"]
