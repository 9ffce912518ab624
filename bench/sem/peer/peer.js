// One process of lockyard's semaphore bench (bench/sem), on the peer:
// redis-semaphore's Semaphore with its defaults (polling every 10 ms,
// refresh at 80% of lockTimeout), on ioredis. It runs `inflight` loops of
// acquire, hold, release for `dur` ms, and prints a JSON line: acquisitions
// and the waits (ms) of each.
//
// usage: node peer.js ADDR KEY PERMITS INFLIGHT DUR_MS HOLD_MS TTL_MS [MODE [GAP_MS]]
// A loop (MODE "loop") waits GAP_MS after each release, if given.
// With a last argument "hold" it acquires one permit, prints "held" and the
// time (µs since the epoch), and waits to be killed; with "once" it
// acquires one permit, prints the time, and releases it.
'use strict'
const Redis = require('ioredis')
const { Semaphore } = require('redis-semaphore')

// nowMicros is the wall clock in µs, as Go's time.Now().UnixMicro().
function nowMicros () {
  return Math.round((performance.timeOrigin + performance.now()) * 1000)
}

async function main () {
  const [addr, key, permits, inflight, dur, hold, ttl, mode, gap] = process.argv.slice(2)
  const [host, port] = addr.split(':')
  const client = new Redis(Number(port), host, { enableAutoPipelining: false })
  const opts = { lockTimeout: Number(ttl), acquireTimeout: 600000 }
  if (mode === 'once') {
    const s = new Semaphore(client, key, Number(permits), opts)
    await s.acquire()
    const t = nowMicros() // before stdout, whose stream is made at its first use
    process.stdout.write(String(t) + '\n')
    await s.release()
    await client.quit()
    return
  }
  if (mode === 'hold') {
    // A warm-up acquisition first: the measured one runs on a warm
    // connection, as a long-running holder's does.
    const warm = new Semaphore(client, key, Number(permits), opts)
    await warm.acquire()
    await warm.release()
    await new Semaphore(client, key, Number(permits), opts).acquire()
    const t = nowMicros() // before stdout, whose stream is made at its first use
    process.stdout.write('held ' + String(t) + '\n')
    setInterval(() => {}, 1000)
    return
  }
  const end = Date.now() + Number(dur)
  const waits = []
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
  const loop = async () => {
    while (Date.now() < end) {
      const s = new Semaphore(client, key, Number(permits), opts)
      const t0 = process.hrtime.bigint()
      await s.acquire()
      waits.push(Number(process.hrtime.bigint() - t0) / 1e6)
      if (Number(hold) > 0) await sleep(Number(hold))
      await s.release()
      if (Number(gap) > 0) await sleep(Number(gap))
    }
  }
  await Promise.all(Array.from({ length: Number(inflight) }, loop))
  process.stdout.write(JSON.stringify({ acquisitions: waits.length, waits }) + '\n')
  await client.quit()
}

main().catch((err) => { console.error(err); process.exit(1) })
