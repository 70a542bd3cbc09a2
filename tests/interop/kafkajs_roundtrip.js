// KafkaJS against a Gregor cluster: produce with the public producer (acks=-1, GZIP for
// one of the batches), then read everything back with Fetch requests through KafkaJS's own
// cluster and protocol code (its Consumer needs consumer groups, which come later).
//
//   node kafkajs_roundtrip.js BROKERS TOPIC COUNT
//
// Prints one JSON object: {"produced": [[partition, baseOffset], ...],
//                          "consumed": [[partition, offset, key, value, header], ...]}
'use strict'

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

async function main() {
  const [brokers, topic, countText] = process.argv.slice(2)
  const count = Number(countText)
  const kafka = new Kafka({ clientId: 'gregor-interop', brokers: brokers.split(','), logLevel: logLevel.WARN })

  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const produced = []
  for (const [partition, compression] of [[0, CompressionTypes.None], [1, CompressionTypes.GZIP]]) {
    const messages = []
    for (let i = 0; i < count; i++) {
      messages.push({ partition, key: `k${i}`, value: `kafkajs ${partition} ${i}`, headers: { h: `${i}` } })
    }
    const result = await producer.send({ topic, acks: -1, compression, messages })
    for (const r of result) produced.push([r.partition, Number(r.baseOffset)])
  }
  await producer.disconnect()

  const createCluster = Object.getOwnPropertySymbols(kafka).find(
    s => s.description === 'private:Kafka:createCluster'
  )
  const cluster = kafka[createCluster]({ allowAutoTopicCreation: false })
  await cluster.connect()
  await cluster.addTargetTopic(topic)
  await cluster.refreshMetadata()
  const consumed = []
  for (const partition of [0, 1]) {
    const leaders = cluster.findLeaderForPartitions(topic, [partition])
    const broker = await cluster.findBroker({ nodeId: Object.keys(leaders)[0] })
    let offset = 0
    while (offset < count) {
      const response = await broker.fetch({
        maxWaitTime: 1000,
        topics: [{ topic, partitions: [{ partition, fetchOffset: String(offset), maxBytes: 1048576 }] }],
      })
      for (const data of response.responses[0].partitions) {
        if (data.errorCode !== 0) throw new Error(`fetch error ${data.errorCode}`)
        for (const m of data.messages) {
          if (Number(m.offset) < offset) continue
          consumed.push([partition, Number(m.offset), m.key.toString(), m.value.toString(), m.headers.h.toString()])
          offset = Number(m.offset) + 1
        }
      }
    }
  }
  await cluster.disconnect()
  process.stdout.write(JSON.stringify({ produced, consumed }))
}

main().catch(error => {
  console.error(error)
  process.exit(1)
})
