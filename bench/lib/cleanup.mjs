// Remove what a bench run wrote on the shared engines: every key, node, schema and file under the
// run's own prefix (`flbench-<run id>`, PostgreSQL schemas `flb_<run id>…`). Nothing else is touched.
import { rmSync } from 'node:fs';
import { connectZookeeper } from './contenders.mjs';

async function redisKeys(nodes, prefix) {
  const { Redis } = await import('ioredis');
  let removed = 0;
  for (const node of nodes) {
    const client = new Redis({ host: node.host, port: node.port, lazyConnect: true });
    client.on('error', () => undefined);
    try {
      await client.connect();
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) removed += await client.unlink(...keys);
      } while (cursor !== '0');
    } finally {
      client.disconnect();
    }
  }
  return removed;
}

async function etcdKeys(hosts, prefix) {
  const { Etcd3 } = await import('etcd3');
  const client = new Etcd3({ hosts: hosts.map((h) => `http://${h}`) });
  try {
    const { deleted } = await client.delete().prefix(prefix).exec();
    return Number(deleted);
  } finally {
    client.close();
  }
}

async function zookeeperNodes(hosts, prefix) {
  const { zk } = await connectZookeeper(hosts, 10_000);
  let removed = 0;
  const removeTree = async (path) => {
    const children = await zk.get_children(path, false).catch(() => []);
    // Siblings in parallel, 64 at a time (a run can leave tens of thousands of nodes).
    for (let i = 0; i < children.length; i += 64) {
      await Promise.all(children.slice(i, i + 64).map((child) => removeTree(`${path}/${child}`)));
    }
    await zk.delete_(path, -1).then(
      () => {
        removed += 1;
      },
      () => undefined,
    );
  };
  try {
    for (const top of await zk.get_children('/', false)) {
      if (top.startsWith(prefix)) await removeTree(`/${top}`);
    }
  } finally {
    zk.close();
  }
  return removed;
}

async function postgresSchemas(endpoint, schemaPrefix) {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ ...endpoint, database: 'fencelock' });
  await client.connect();
  try {
    const { rows } = await client.query(
      'SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)',
      [schemaPrefix],
    );
    for (const { nspname } of rows) await client.query(`DROP SCHEMA "${nspname}" CASCADE`);
    return rows.length;
  } finally {
    await client.end();
  }
}

/**
 * Remove the run's keys, nodes, schemas and files from the engines of `stores`.
 * @returns what was removed per store (or why it could not be).
 */
export async function cleanUp({ stores, endpoints, prefix, pgSchemaPrefix, tmpDir }) {
  const done = {};
  const attempt = async (store, work) => {
    if (!stores.includes(store)) return;
    try {
      done[store] = await work();
    } catch (error) {
      done[store] = `failed: ${error?.message ?? error}`;
    }
  };
  await attempt('redis', () => redisKeys([endpoints.redis], prefix));
  await attempt('redlock', () => redisKeys(endpoints.redlock, prefix));
  await attempt('etcd', () => etcdKeys(endpoints.etcd, prefix));
  await attempt('zookeeper', () => zookeeperNodes(endpoints.zookeeper, prefix));
  await attempt('postgres', () => postgresSchemas(endpoints.postgres, pgSchemaPrefix));
  rmSync(tmpDir, { recursive: true, force: true });
  return done;
}
