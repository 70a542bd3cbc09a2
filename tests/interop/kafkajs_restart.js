// A KafkaJS consumer (default settings but a 6 s session) reading a topic from the beginning
// with a new group, for the issue 10 reproduction: what it logged of crashes, restarts and
// joins, and when it read each record.
//
//   node kafkajs_restart.js BROKERS TOPIC GROUP COUNT DEADLINE_MS
//
// Prints one JSON line per event: {"ms": since start, "event": "crash" | "restart" |
// "joined" | "record" | "deadline", ...}; exits once COUNT records were read (0) or at the
// deadline (2).
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const [brokers, topic, groupId, countText, deadlineText] = process.argv.slice(2)
  const started = Date.now()
  const say = (event, extra = {}) =>
    process.stdout.write(`${JSON.stringify({ ms: Date.now() - started, event, ...extra })}\n`)
  const logCreator = () => ({ log }) => {
    if (log.message.startsWith('Crash:')) say('crash', { error: log.message })
    else if (log.message.startsWith('Restarting the consumer')) say('restart')
    else if (log.message === 'Consumer has joined the group') say('joined', { memberId: log.memberId })
  }
  const kafka = new Kafka({ clientId: 'restart', brokers: brokers.split(','), logLevel: logLevel.INFO, logCreator })
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000 })
  let read = 0
  let allRead
  const done = new Promise(resolve => { allRead = resolve })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      say('record', { value: message.value.toString() })
      if (++read >= Number(countText)) allRead(true)
    },
  })
  const timer = setTimeout(() => allRead(false), Number(deadlineText))
  const ok = await done
  clearTimeout(timer)
  if (!ok) say('deadline')
  await consumer.disconnect()
  process.exit(ok ? 0 : 2)
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
