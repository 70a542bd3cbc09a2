// Fresh topics and fresh KafkaJS consumer groups, one after another, each consumer waited
// for until it has read every record (the issue 10 stall: a new group's consumer that
// silently received nothing). KafkaJS consumers read read_committed by default.
//
//   node kafkajs_stress.js BROKERS PREFIX ITERATIONS DEADLINE_MS STALL_MS
//
// Iteration i: create topic PREFIX-i (3 partitions, 3 replicas; leaders not waited for on
// odd i), produce 12 uncompressed records (4 per partition, acks=-1) before the group joins
// (even i) or after it has joined (odd i), and read them with a new group from the
// beginning. Prints one JSON line per iteration:
//   {"iteration": i, "read": [values...], "ms": time from the consumer's start to the last
//    record (or to the deadline)}
// and, for an iteration that read less than all or took longer than STALL_MS, the
// consumer's debug log on stderr (a crash KafkaJS restarts from is logged there).
'use strict'

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const RECORDS = 12

async function iteration(brokers, prefix, i, deadlineMs, stallMs) {
  const lines = []
  const logCreator = () => ({ namespace, label, log }) => {
    const { message, timestamp, logger, ...rest } = log
    lines.push(`${timestamp} ${label} [${namespace}] ${message} ${JSON.stringify(rest)}`)
  }
  const kafka = new Kafka({
    clientId: `stress-${i}`,
    brokers: brokers.split(','),
    logLevel: logLevel.DEBUG,
    logCreator,
  })
  const topic = `${prefix}-${i}`
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({
    topics: [{ topic, numPartitions: 3, replicationFactor: 3 }],
    waitForLeaders: i % 2 === 0,
  })
  await admin.disconnect()

  const produce = async () => {
    const producer = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    const messages = []
    for (let k = 0; k < RECORDS; k++) messages.push({ partition: k % 3, value: `${i}-${k}` })
    await producer.send({ topic, acks: -1, compression: CompressionTypes.None, messages })
    await producer.disconnect()
  }

  const consumer = kafka.consumer({ groupId: `${topic}-group` })
  const read = []
  let allRead
  const done = new Promise(resolve => { allRead = resolve })
  const started = Date.now()
  const consume = async () => {
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ message }) => {
        read.push(message.value.toString())
        if (read.length >= RECORDS) allRead()
      },
    })
  }
  if (i % 2 === 0) {
    await produce()
    await consume()
  } else {
    await consume()
    await produce()
  }
  let timer
  const deadline = new Promise(resolve => { timer = setTimeout(resolve, deadlineMs) })
  await Promise.race([done, deadline])
  clearTimeout(timer)
  const ms = Date.now() - started
  await consumer.disconnect()
  if (read.length < RECORDS || ms > stallMs) {
    process.stderr.write(`iteration ${i} read ${read.length} in ${ms} ms:\n${lines.join('\n')}\n`)
  }
  return { iteration: i, read, ms }
}

async function main() {
  const [brokers, prefix, countText, deadlineText, stallText] = process.argv.slice(2)
  for (let i = 0; i < Number(countText); i++) {
    const result = await iteration(brokers, prefix, i, Number(deadlineText), Number(stallText))
    process.stdout.write(`${JSON.stringify(result)}\n`)
  }
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
