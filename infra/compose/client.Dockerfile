# A client host: kcat and confluent-kafka, as the tests' clients. It idles until a client
# is run in it (docker compose exec dc1-client kcat -b dc1-broker1:9092 -L).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends kcat \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir 'confluent-kafka>=2.4'
CMD ["sleep", "infinity"]
