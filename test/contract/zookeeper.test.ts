/**
 * The backend contract on the real 3-server ZooKeeper ensemble of `scripts/services.sh`. Every
 * run uses its own namespace, so runs and other test files never share a node.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeEach } from 'vitest';
import { createZookeeperBackend } from '../../packages/fencelock/src/backends/zookeeper/index.js';
import { ZK_HOSTS } from '../helpers/engines.js';
import { openAdmin, removeTree, type ZkAdmin } from '../helpers/zookeeper.js';
import { ensembleNotesSince } from '../helpers/zookeeper-logs.js';
import { describeBackend } from './backend.contract.js';

const namespace = `fencelock-contract-${randomBytes(4).toString('hex')}`;
const url = `zk://${ZK_HOSTS}/${namespace}`;

/** Test-only client for the engine hooks (never used by a backend). */
let admin: Promise<ZkAdmin> | undefined;

let testStartedAt = 0;
beforeEach(() => {
  testStartedAt = Date.now();
});
// A failed test reports what the servers logged meanwhile, as an error of the test so that it
// stands beside the failure in a CI summary: a stalled server and a lost request look the same
// from the client ("no answer within 5000 ms").
afterEach(({ task }) => {
  if (task.result?.state !== 'fail') return;
  const notes = ensembleNotesSince(testStartedAt - 1000);
  throw new Error(
    `ZooKeeper servers during "${task.name}":\n${notes || '(no warning, error or pause over 50 ms)'}`,
  );
});

afterAll(async () => {
  if (admin === undefined) return;
  const zk = await admin;
  await removeTree(zk, `/${namespace}`);
  zk.close();
});

describeBackend('zookeeper', () => {
  const backend = createZookeeperBackend({ url });
  return {
    backend,
    storeUrl: url,
    // The TTL is the session timeout the server negotiates: any value within [2, 20] × tickTime
    // (tickTime 500 ms in scripts/services.sh, so at least 1,000 ms). Tokens are zxids (shared
    // by every node), and inspect() reports the newest contender node's, 0n when there is none.
    ttlGranularityMs: 1,
    minTtlMs: 1_000,
    consecutiveTokens: false,
    lastTokenOutlivesHolder: false,
    // The engine loses the lock: every contender node under it is deleted.
    deleteKey: async (key) => {
      admin ??= openAdmin();
      const zk = await admin;
      const dir = backend.dirOf(key);
      for (const name of await zk.get_children(dir, false).catch(() => [])) {
        await zk.delete_(`${dir}/${name}`, -1).catch(() => undefined);
      }
    },
  };
});
