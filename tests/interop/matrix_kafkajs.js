// KafkaJS cells of the interop matrix (tests/interop/test_matrix.py).
//
//   node matrix_kafkajs.js metadata BROKERS TOPIC PREFIX
//     -> {"brokers": [[id, host, port]], "controller": id, "topics": [...],
//         "leaders": {partition: leader}, "matched": [values read by a regex subscription]}
//   node matrix_kafkajs.js produce BROKERS TOPIC CODEC RECORDS_JSON
//     RECORDS_JSON: [[key_b64|null, value_b64, [[name, value_b64], ...], timestamp], ...]
'use strict'

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

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

// A transactional send: one record, with short timeouts.
async function transaction(kafka, topic) {
  const producer = kafka.producer({ transactionalId: `${topic}-txn`, idempotent: true, retry: { retries: 1 } })
  await producer.connect()
  const txn = await producer.transaction()
  await txn.send({ topic, messages: [{ partition: 0, value: 'committed' }] })
  await txn.commit()
  await producer.disconnect()
  return {}
}

async function main() {
  const [command, brokers, topic, ...rest] = process.argv.slice(2)
  const kafka = new Kafka({ clientId: 'gregor-matrix', brokers: brokers.split(','), logLevel: logLevel.WARN })
  const commands = {
    metadata: () => metadata(kafka, topic, rest[0]),
    produce: () => produce(kafka, topic, rest[0], JSON.parse(require('fs').readFileSync(rest[1]))),
    transaction: () => transaction(kafka, topic),
  }
  const result = await commands[command]()
  process.stdout.write(JSON.stringify(result))
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
