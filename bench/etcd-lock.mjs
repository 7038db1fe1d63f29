// Acquire/release rates of fencelock's etcd backend next to the etcd3 package's own Lock, in the
// same run, on the cluster of scripts/services.sh. A first measurement ahead of the full bench
// suite; prints ratios. Usage: npm run build && node bench/etcd-lock.mjs [pairs]
import { Etcd3 } from 'etcd3';
import { createLocker } from '../dist/index.js';

const base = Number(process.env.FENCELOCK_ETCD_CLIENT_PORT_BASE || 23790);
const hosts = [1, 2, 3].map((n) => `127.0.0.1:${base + n}`);
const pairs = Number(process.argv[2] ?? 300);
const contenders = 8;
const run = Date.now().toString(36);

async function timed(fn) {
  const started = performance.now();
  await fn();
  return (performance.now() - started) / 1000;
}

async function fencelockUncontended() {
  const locker = createLocker(`etcd://${hosts.join(',')}/bench-${run}`, { ttlMs: 10_000 });
  await (await locker.acquire('warm-up')).release();
  const s = await timed(async () => {
    for (let i = 0; i < pairs; i++) await (await locker.acquire(`u-${i}`)).release();
  });
  await locker.close();
  return pairs / s;
}

async function etcd3Uncontended() {
  const client = new Etcd3({ hosts: hosts.map((h) => `http://${h}`) });
  const s = await timed(async () => {
    for (let i = 0; i < pairs; i++) {
      const lock = client.lock(`bench-${run}/etcd3-u-${i}`).ttl(10);
      await lock.acquire();
      await lock.release();
    }
  });
  client.close();
  return pairs / s;
}

async function fencelockContended() {
  const lockers = Array.from({ length: contenders }, () =>
    createLocker(`etcd://${hosts.join(',')}/bench-${run}`, { ttlMs: 10_000 }),
  );
  let left = pairs;
  const s = await timed(() =>
    Promise.all(
      lockers.map(async (locker) => {
        while (left > 0) {
          left -= 1;
          await locker.withLock('contended', () => undefined);
        }
      }),
    ),
  );
  await Promise.all(lockers.map((l) => l.close()));
  return pairs / s;
}

async function etcd3Contended() {
  const clients = Array.from(
    { length: contenders },
    () => new Etcd3({ hosts: hosts.map((h) => `http://${h}`) }),
  );
  let left = pairs;
  // etcd3's Lock does not wait: acquire() fails while the key is held, so retry as its docs do.
  const s = await timed(() =>
    Promise.all(
      clients.map(async (client) => {
        while (left > 0) {
          const lock = client.lock(`bench-${run}/etcd3-contended`).ttl(10);
          try {
            await lock.acquire();
          } catch {
            await new Promise((r) => setTimeout(r, Math.random() * 20));
            continue;
          }
          left -= 1;
          await lock.release();
        }
      }),
    ),
  );
  for (const c of clients) c.close();
  return pairs / s;
}

const rows = [];
for (const [name, fencelock, etcd3] of [
  ['uncontended, 1 client', fencelockUncontended, etcd3Uncontended],
  [`contended, ${contenders} clients, 1 key`, fencelockContended, etcd3Contended],
]) {
  const f = await fencelock();
  const e = await etcd3();
  rows.push({
    workload: name,
    'fencelock pairs/s': f.toFixed(0),
    'etcd3 Lock pairs/s': e.toFixed(0),
    ratio: (f / e).toFixed(2),
  });
}
console.table(rows);
