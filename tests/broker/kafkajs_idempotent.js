// KafkaJS's idempotent producer, for tests/broker/test_idempotence.py: like
// idempotent_producer.py, it produces `kafkajs <n>` to partition 0 of TOPIC (idempotent,
// acks=-1, maxInFlightRequests 5) until its stdin closes, printing `<offset> <value>` for
// each acknowledged record and `FAILED <value> <error>` for each failed one.
//
//   NODE_PATH=tests/interop/node_modules node kafkajs_idempotent.js BROKERS TOPIC
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const BURST = 20
const IN_FLIGHT = 5

async function main() {
  const [brokers, topic] = process.argv.slice(2)
  const kafka = new Kafka({
    clientId: 'gregor-idempotence',
    brokers: brokers.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: Number.MAX_SAFE_INTEGER, maxRetryTime: 2000 },
  })
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: IN_FLIGHT,
    allowAutoTopicCreation: false,
  })
  let stopped = false
  process.stdin.on('data', () => {})
  process.stdin.on('end', () => { stopped = true })
  await producer.connect()
  let count = 0
  while (!stopped) {
    // One send at a time: KafkaJS numbers a send's batch when it goes out and renumbers it
    // after a failure, so only sends awaited in turn keep their order through retries. The
    // producer itself may have maxInFlightRequests requests out.
    const values = []
    for (let i = 0; i < BURST; i++) values.push(`kafkajs ${String(count++).padStart(9, '0')}`)
    try {
      const result = await producer.send({
        topic,
        acks: -1,
        messages: values.map(value => ({ partition: 0, value })),
      })
      const base = Number(result[0].baseOffset)
      values.forEach((value, i) => process.stdout.write(`${base + i} ${value}\n`))
    } catch (error) {
      const text = String(error).replace(/\n/g, ' ')
      values.forEach(value => process.stdout.write(`FAILED ${value} ${text}\n`))
    }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  await producer.disconnect()
}

main().catch(error => {
  console.error(error)
  process.exit(1)
})
