// KafkaJS cells of the interop matrix (tests/interop/test_matrix.py).
//
//   node matrix_kafkajs.js metadata BROKERS TOPIC PREFIX
//     -> {"brokers": [[id, host, port]], "controller": id, "topics": [...],
//         "leaders": {partition: leader}, "matched": [values read by a regex subscription]}
//   node matrix_kafkajs.js produce BROKERS TOPIC CODEC RECORDS_JSON
//     RECORDS_JSON: [[key_b64|null, value_b64, [[name, value_b64], ...], timestamp], ...]
//   node matrix_kafkajs.js admin BROKERS TOPIC GROUP
//     -> what kafka.admin() saw at each step (see `admin`)
'use strict'

const { Kafka, CompressionTypes, ConfigResourceTypes, logLevel } = require('kafkajs')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

async function metadata(kafka, topic, prefix) {
  const admin = kafka.admin()
  await admin.connect()
  const cluster = await admin.describeCluster()
  const topics = await admin.listTopics()
  const described = await admin.fetchTopicMetadata({ topics: [topic] })
  await admin.disconnect()
  const leaders = {}
  for (const p of described.topics[0].partitions) leaders[p.partitionId] = p.leader

  const consumer = kafka.consumer({ groupId: `${prefix}-regex` })
  await consumer.connect()
  await consumer.subscribe({ topics: [new RegExp(`^${prefix}.*`)], fromBeginning: true })
  const matched = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`regex subscription read ${matched.length}`)), 60000)
    consumer.run({
      eachMessage: async ({ topic: from, message }) => {
        if (from === topic) matched.push(message.value.toString())
        if (matched.length >= 3) { clearTimeout(timer); resolve() }
      },
    })
  })
  await consumer.disconnect()
  return {
    brokers: cluster.brokers.map(b => [b.nodeId, b.host, b.port]),
    controller: cluster.controller,
    topics,
    leaders,
    matched,
  }
}

async function produce(kafka, topic, codec, records) {
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const messages = records.map(([key, value, headers, timestamp]) => {
    const byName = {}
    for (const [name, v] of headers) (byName[name] = byName[name] || []).push(Buffer.from(v, 'base64'))
    return {
      partition: 0,
      key: key === null ? null : Buffer.from(key, 'base64'),
      value: Buffer.from(value, 'base64'),
      headers: byName,
      timestamp: String(timestamp),
    }
  })
  await producer.send({ topic, acks: -1, compression: CODECS[codec], messages })
  await producer.disconnect()
  return {}
}

// Transactions on partition 0: two records committed, one aborted, then one committed
// with the group's offset (sendOffsets), so another client can check what read_committed
// and read_uncommitted see and the offset the commit made visible.
async function transaction(kafka, topic, groupId) {
  const producer = kafka.producer({ transactionalId: `${topic}-txn`, idempotent: true, retry: { retries: 1 } })
  await producer.connect()
  const first = await producer.transaction()
  await first.send({ topic, messages: [{ partition: 0, value: 'c1' }, { partition: 0, value: 'c2' }] })
  await first.commit()
  const aborted = await producer.transaction()
  await aborted.send({ topic, messages: [{ partition: 0, value: 'aborted' }] })
  await aborted.abort()
  const last = await producer.transaction()
  await last.send({ topic, messages: [{ partition: 0, value: 'c3' }] })
  await last.sendOffsets({
    consumerGroupId: groupId,
    topics: [{ topic, partitions: [{ partition: 0, offset: '3' }] }],
  })
  await last.commit()
  await producer.disconnect()
  return {}
}

// What `ask()` answers once it answers `wanted` (metadata every broker learns shortly after
// the controller, as in Kafka), or at the deadline.
async function eventually(ask, wanted, deadlineMs = 30000) {
  const until = Date.now() + deadlineMs
  for (;;) {
    const found = await ask()
    if (JSON.stringify(found) === JSON.stringify(wanted) || Date.now() > until) return found
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

// kafka.admin() through what it has: create a topic with configs, create partitions,
// describe and alter configs, delete records, list and describe a live group (a consumer of
// its own), delete the group once empty, delete the topic.
async function admin(kafka, topic, groupId) {
  const out = {}
  const admin = kafka.admin()
  await admin.connect()
  const retention = async () => {
    const { resources } = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }],
      includeSynonyms: false,
    })
    return Object.fromEntries(resources[0].configEntries.map(e => [e.configName, e.configValue]))
  }
  out.created = await admin.createTopics({
    topics: [{ topic, numPartitions: 2, replicationFactor: 3, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
    waitForLeaders: true,
  })
  out.configsCreated = await retention()
  await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
  const partitionCount = async () => (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length
  out.partitions = await eventually(partitionCount, 4)
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }] }],
  })
  out.configsAltered = await retention()

  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const messages = []
  for (let i = 0; i < 10; i++) messages.push({ partition: 0, value: `r${i}` })
  await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '6' }] })
  out.offsetsAfterDelete = (await admin.fetchTopicOffsets(topic))
    .filter(p => p.partition === 0)
    .map(p => [Number(p.low), Number(p.high)])[0]

  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const read = []
  let allRead
  const done = new Promise(resolve => { allRead = resolve })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      read.push([partition, Number(message.offset)])
      if (read.length >= 4) allRead()
    },
  })
  await done
  await consumer.commitOffsets([{ topic, partition: 0, offset: '10' }])
  out.read = read
  out.listed = (await admin.listGroups()).groups.filter(g => g.groupId === groupId)
  const described = (await admin.describeGroups([groupId])).groups[0]
  out.described = {
    state: described.state,
    protocolType: described.protocolType,
    protocol: described.protocol,
    members: described.members.length,
  }
  await consumer.disconnect()
  out.committed = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
    .filter(p => p.partition === 0).map(p => Number(p.offset))
  out.deletedGroups = (await admin.deleteGroups([groupId])).map(g => [g.groupId, g.errorCode])
  out.groupsAfter = (await admin.listGroups()).groups.filter(g => g.groupId === groupId)
  await admin.deleteTopics({ topics: [topic] })
  out.topicsAfter = await eventually(async () => (await admin.listTopics()).filter(t => t === topic), [])
  await admin.disconnect()
  return out
}

async function main() {
  const [command, brokers, topic, ...rest] = process.argv.slice(2)
  const kafka = new Kafka({ clientId: 'gregor-matrix', brokers: brokers.split(','), logLevel: logLevel.WARN })
  const commands = {
    metadata: () => metadata(kafka, topic, rest[0]),
    produce: () => produce(kafka, topic, rest[0], JSON.parse(require('fs').readFileSync(rest[1]))),
    transaction: () => transaction(kafka, topic, rest[0]),
    admin: () => admin(kafka, topic, rest[0]),
  }
  const result = await commands[command]()
  process.stdout.write(JSON.stringify(result))
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
