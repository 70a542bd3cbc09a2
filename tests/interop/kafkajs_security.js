// KafkaJS over TLS and SASL: produce COUNT records, read them back with a consumer group.
//
//   node kafkajs_security.js BROKERS TOPIC COUNT MODE CA CERT KEY USER PASSWORD
//
// MODE is SSL (CERT and KEY for mutual TLS), SASL_PLAINTEXT (PLAIN) or SASL_SSL
// (SCRAM-SHA-512). Prints {"consumed": [value, ...]}, or {"error": name, "message": ...}
// and exits 2 when the client refuses (a wrong password: KafkaJSSASLAuthenticationError).
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const [brokers, topic, countText, mode, ca, cert, key, username, password] = process.argv.slice(2)
  const count = Number(countText)
  const config = { clientId: 'gregor-security', brokers: brokers.split(','), logLevel: logLevel.NOTHING,
    retry: { retries: 2 } }
  if (mode === 'SSL' || mode === 'SASL_SSL') {
    config.ssl = { ca: [fs.readFileSync(ca, 'utf-8')] }
    if (mode === 'SSL') {
      config.ssl.cert = fs.readFileSync(cert, 'utf-8')
      config.ssl.key = fs.readFileSync(key, 'utf-8')
    }
  }
  if (mode.startsWith('SASL_')) {
    config.sasl = { mechanism: mode === 'SASL_SSL' ? 'scram-sha-512' : 'plain', username, password }
  }
  const kafka = new Kafka(config)
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  try {
    await producer.connect()
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: e.name, message: e.message }))
    process.exit(2)
  }
  const messages = []
  for (let i = 0; i < count; i++) messages.push({ key: `k${i}`, value: `${mode} ${i}` })
  await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: `g-${topic}` })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const consumed = []
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        consumed.push(message.value.toString())
        if (consumed.length === count) resolve()
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ consumed }))
}

main().catch(e => {
  process.stderr.write(`${e.stack}\n`)
  process.exit(1)
})
