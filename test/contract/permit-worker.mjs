// One process of the semaphore contract's multi-process case (semaphore-processes.ts): it runs
// `contenders` clients of one key's semaphore over one locker, as the torture clients do
// (tools/torture/src/client.ts): each takes a permit, writes twice through the torture harness's
// fenced register (tools/torture/src/register.ts), releases, `rounds` times. It reports every
// step to its parent over IPC, stamped with the machine's monotonic clock (process.hrtime:
// CLOCK_MONOTONIC, one clock for every process), in the torture checker's event shape
// (tools/torture/src/checker.ts), then `{ type: 'done', outcomes }` and exits.
//
// Configuration: one JSON argument (see `PermitWorkerConfig` in semaphore-processes.ts). It loads
// the library and the register from the private build (test/helpers/private-build.ts).
import { setTimeout as delay } from 'node:timers/promises';

const config = JSON.parse(process.argv[2]);
const { createLocker } = await import(`${config.libraryDir}/index.js`);
const { FencedRegister } = await import(config.registerModule);

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const report = (client, type, fields = {}) =>
  process.send({ at: nowMs(), client, type, ...fields });

const locker = createLocker(config.store, {
  retry: { initialDelayMs: 2, maxDelayMs: 40, factor: 2 },
});
// No register for a holder that is only there to be killed (`holdForever`).
const register =
  config.registerSchema === undefined
    ? undefined
    : new FencedRegister(config.registerUrl, config.registerSchema, config.permits);
const semaphore = locker.semaphore(config.key, { permits: config.permits });
const outcomes = [];

async function contender(client) {
  for (let round = 0; round < config.rounds; round++) {
    report(client, 'acquiring');
    const permit = await semaphore.acquire({ ttlMs: config.ttlMs, waitMs: config.waitMs });
    report(client, 'acquired', {
      token: permit.fencingToken.toString(),
      remainingMs: permit.remainingMs,
    });
    for (let write = 0; register !== undefined && write < 2; write++) {
      if (write > 0) await delay(1 + Math.floor(Math.random() * 5));
      const knewLost = permit.signal.aborted;
      const accepted = await register.write(permit.fencingToken, client, true);
      report(client, 'written', { accepted, knewLost });
    }
    // `holdForever`: keep the permit (the watchdog renewing it) until the parent kills the process.
    if (config.holdForever) await new Promise(() => setInterval(() => undefined, 60_000));
    report(client, 'releasing');
    outcomes.push(await permit.release());
  }
}

let last;
try {
  await Promise.all(
    Array.from({ length: config.contenders }, (_, i) => contender(`${config.name}-${i}`)),
  );
  last = { type: 'done', outcomes };
} catch (error) {
  last = { type: 'error', message: error?.stack ?? String(error) };
}
await locker.close();
await register?.close();
// The last message, then the channel closes and nothing is left to keep the process alive.
process.send(last, () => process.disconnect());
