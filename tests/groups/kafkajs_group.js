// A KafkaJS consumer group against a Gregor cluster: two consumers of one group share a
// topic, commit each record's offset, and the group is described while both are in it.
//
//   NODE_PATH=tests/interop/node_modules node kafkajs_group.js BROKERS TOPIC GROUP COUNT
//
// Prints one JSON object: {"consumed": [[member, partition, offset, value], ...],
//   "described": {"state": ..., "protocolType": ..., "protocol": ..., "members": N},
//   "committed": [[partition, offset], ...]}
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const [brokers, topic, groupId, countText] = process.argv.slice(2)
  const count = Number(countText)
  const kafka = new Kafka({ clientId: 'gregor-groups', brokers: brokers.split(','), logLevel: logLevel.WARN })
  const consumed = []
  let resolveAll
  const allRead = new Promise(resolve => { resolveAll = resolve })

  const members = [0, 1].map(() =>
    kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500, rebalanceTimeout: 10000 })
  )
  for (const [index, consumer] of members.entries()) {
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        consumed.push([index, partition, Number(message.offset), message.value.toString()])
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
        if (consumed.length >= count) resolveAll()
      },
    })
  }
  await allRead

  const admin = kafka.admin()
  await admin.connect()
  const { groups } = await admin.describeGroups([groupId])
  const group = groups[0]
  for (const consumer of members) await consumer.disconnect()
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  await admin.disconnect()
  process.stdout.write(JSON.stringify({
    consumed,
    described: {
      state: group.state,
      protocolType: group.protocolType,
      protocol: group.protocol,
      members: group.members.length,
    },
    committed: offsets[0].partitions.map(p => [p.partition, Number(p.offset)]),
  }))
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
