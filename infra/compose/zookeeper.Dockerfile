# A ZooKeeper server of the deployment: Debian's zookeeper package, as infra/setup.sh installs
# it for the namespace topology. Its zoo.cfg is mounted at /etc/gregor/zoo.cfg; its myid
# comes from ZOO_MY_ID (an ensemble member) and is written into the data volume at start.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends zookeeper openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
CMD ["sh", "-c", "mkdir -p /var/lib/gregor/data && if [ -n \"$ZOO_MY_ID\" ]; then echo \"$ZOO_MY_ID\" > /var/lib/gregor/data/myid; fi && exec java -Xmx256m -XX:+UseSerialGC -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain /etc/gregor/zoo.cfg"]
