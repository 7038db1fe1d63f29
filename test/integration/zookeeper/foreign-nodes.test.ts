/**
 * Children of a key's node that fencelock did not write never block the lock: only names of the
 * contender shape `_c_<owner>-<w|r>-<sequence>`, with an owner id as fencelock makes them (32 to
 * 128 hex digits), count, in the predecessor rule and in `inspect`. The admin client creates the
 * others: a plain name, a name of that shape with a short owner (before, taken for a holder
 * `abc` that blocked every acquire), and one with a sequence that is not 10 digits.
 */
import { describe, expect, it } from 'vitest';
import { children, useNamespace } from './support.js';

const ns = useNamespace('foreign');

/** Persistent nodes (`CreateMode.PERSISTENT`). */
const PERSISTENT = 0;

describe('zookeeper: foreign nodes under a lock', () => {
  it('a node fencelock did not write is no holder, no predecessor, and stays untouched', async () => {
    const locker = ns.locker({ ttlMs: 4000 });
    const dir = ns.backend().dirOf('jobs');
    for (const path of [`/${ns.namespace}`, `/${ns.namespace}/locks`, dir]) {
      await ns.admin.create(path, '', PERSISTENT);
    }
    const foreign = ['foreign', '_c_abc-w-0000000000', `_c_${'a'.repeat(32)}-w-7`];
    for (const name of foreign) await ns.admin.create(`${dir}/${name}`, '', PERSISTENT);

    expect(await locker.inspect('jobs')).toEqual({
      key: 'jobs',
      holder: null,
      lastFencingToken: 0n,
    });
    const lease = await locker.tryAcquire('jobs');
    expect(lease).not.toBeNull();
    const info = await locker.inspect('jobs');
    expect(info.holder).toMatchObject({ owner: lease!.owner, fencingToken: lease!.fencingToken });
    expect(info.lastFencingToken).toBe(lease!.fencingToken);

    // A reader too, behind a foreign "writer".
    expect(await lease!.release()).toBe('released');
    const read = await locker.tryAcquire('jobs', { mode: 'read' });
    expect(read).not.toBeNull();
    expect(await read!.release()).toBe('released');
    expect((await children(ns.admin, dir)).sort()).toEqual([...foreign].sort());
  });
});
