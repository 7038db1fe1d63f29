/**
 * The backend contract on the real 3-member etcd cluster of `scripts/services.sh`. Every run
 * uses its own namespace, so runs and other test files never share a key.
 */
import { randomBytes } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { afterAll } from 'vitest';
import { createEtcdBackend } from '../../packages/fencelock/src/backends/etcd/index.js';
import { ETCD_ENDPOINTS } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const namespace = `fencelock-contract-${randomBytes(4).toString('hex')}`;
const url = `etcd://${ETCD_ENDPOINTS.map((e) => e.replace('http://', '')).join(',')}/${namespace}`;

/** Test-only connection for the engine hooks (never used by a backend). */
let admin: Etcd3 | undefined;
function adminClient(): Etcd3 {
  admin ??= new Etcd3({ hosts: [...ETCD_ENDPOINTS] });
  return admin;
}

afterAll(async () => {
  if (admin === undefined) return;
  await admin.delete().prefix(`${namespace}/`);
  admin.close();
});

describeBackend('etcd', () => {
  const backend = createEtcdBackend({ url });
  return {
    backend,
    storeUrl: url,
    // Leases are whole seconds, at least the server's minimum TTL: 1.5 × the 1,000 ms election
    // timeout of scripts/services.sh, rounded up to 2 s. Tokens are cluster revisions (shared by
    // every key), and inspect() reports the newest contender key's, 0n when there is none.
    ttlGranularityMs: 1_000,
    minTtlMs: 2_000,
    consecutiveTokens: false,
    lastTokenOutlivesHolder: false,
    // The engine loses the lock: every contender key under it is deleted.
    deleteKey: async (key) => {
      await adminClient().delete().prefix(backend.dirOf(key));
    },
  };
});
