// KafkaJS re-authentication (KIP-368): produce one record at a time over SASL_PLAINTEXT
// (PLAIN) until a line arrives on stdin, re-authenticating THRESHOLD ms before each SASL
// session's lifetime ends (KafkaJS's `reauthenticationThreshold`).
//
//   node kafkajs_reauth.js BROKERS TOPIC USER PASSWORD THRESHOLD
//
// Prints {"offsets": [offset, ...]} (each record's, as the broker acknowledged it).
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const [brokers, topic, username, password, threshold] = process.argv.slice(2)
  const kafka = new Kafka({
    clientId: 'gregor-reauth',
    brokers: brokers.split(','),
    logLevel: logLevel.NOTHING,
    sasl: { mechanism: 'plain', username, password },
    reauthenticationThreshold: Number(threshold),
  })
  let stop = false
  process.stdin.on('data', () => { stop = true })
  process.stdin.on('end', () => { stop = true })
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const offsets = []
  for (let i = 0; !stop; i++) {
    const [sent] = await producer.send({ topic, acks: -1, messages: [{ value: `v${i}` }] })
    offsets.push(Number(sent.baseOffset))
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify({ offsets }))
}

main().catch(e => {
  process.stderr.write(`${e.stack}\n`)
  process.exit(1)
})
