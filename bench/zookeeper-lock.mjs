// Acquire/release rates of fencelock's ZooKeeper backend next to the raw recipe done by hand with
// the same native client (create an ephemeral sequential node, list the children, delete it: the
// least a ZooKeeper lock can cost), in the same run, on the ensemble of scripts/services.sh.
// A first measurement ahead of the full bench suite; prints ratios.
// Usage: npm run build && node bench/zookeeper-lock.mjs [pairs]
import { createRequire } from 'node:module';
import { createLocker } from '../dist/index.js';

const require = createRequire(import.meta.url);
const ZooKeeper = require('zookeeper');
const base = Number(process.env.FENCELOCK_ZK_CLIENT_PORT_BASE || 21811);
const hosts = [0, 1, 2].map((n) => `127.0.0.1:${base + n}`).join(',');
const pairs = Number(process.argv[2] ?? 500);
const contenders = 8;
const run = Date.now().toString(36);
const ns = `bench-${run}`;

async function timed(fn) {
  const started = performance.now();
  await fn();
  return (performance.now() - started) / 1000;
}

async function fencelockUncontended() {
  const locker = createLocker(`zk://${hosts}/${ns}`, { ttlMs: 10_000 });
  await (await locker.acquire('warm-up')).release();
  const s = await timed(async () => {
    for (let i = 0; i < pairs; i++) await (await locker.acquire(`u-${i % 20}`)).release();
  });
  await locker.close();
  return pairs / s;
}

async function connectRaw() {
  const zk = new ZooKeeper({ connect: hosts, timeout: 10_000, debug_level: 0 });
  await new Promise((resolve) => {
    zk.once('connect', resolve);
    zk.init({});
  });
  return zk;
}

async function rawUncontended() {
  const zk = await connectRaw();
  await zk.mkdirp(`/${ns}-raw`, () => undefined);
  await zk.create(`/${ns}-raw`, '', ZooKeeper.constants.ZOO_PERSISTENT).catch(() => undefined);
  const s = await timed(async () => {
    for (let i = 0; i < pairs; i++) {
      const path = await zk.create(
        `/${ns}-raw/n-`,
        '',
        ZooKeeper.constants.ZOO_EPHEMERAL_SEQUENTIAL,
      );
      await zk.get_children(`/${ns}-raw`, false);
      await zk.delete_(path, -1);
    }
  });
  await zk.delete_(`/${ns}-raw`, -1).catch(() => undefined);
  zk.close();
  return pairs / s;
}

async function fencelockContended() {
  const lockers = Array.from({ length: contenders }, () =>
    createLocker(`zk://${hosts}/${ns}`, { ttlMs: 10_000 }),
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

const fu = await fencelockUncontended();
const ru = await rawUncontended();
const fc = await fencelockContended();
console.log(
  JSON.stringify(
    {
      pairs,
      uncontended: { fencelock: Math.round(fu), raw: Math.round(ru), ratio: +(fu / ru).toFixed(2) },
      contended: { fencelock: Math.round(fc), contenders },
    },
    null,
    2,
  ),
);
