/**
 * Read-write downgrade and upgrade on etcd: the rules of test/integration/rwlock-rules.ts, on the
 * 3-member cluster.
 */
import { describe } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import { downgradeAndUpgradeTests } from '../rwlock-rules.js';
import { contenders, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('rw-downgrade');

describe('etcd read-write lock: downgrade and upgrade', () => {
  downgradeAndUpgradeTests({
    engine: 'etcd',
    locker: (options) => fixture.locker(options),
    dirOf: (backend, key) => (backend as EtcdBackend).dirOf(key),
    line: async (dir) =>
      (await contenders(fixture.admin, dir)).map((c) => {
        const name = c.key.slice(dir.length);
        const owner = name.slice(name.lastIndexOf('-') + 1);
        return [owner, name.startsWith('r-') ? 'read' : 'write', c.createRevision];
      }),
    count: (dir) => fixture.admin.getAll().prefix(dir).count(),
    waitForCount: (dir, n) => waitForCount(fixture.admin, dir, n),
  });
});
