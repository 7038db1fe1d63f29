/**
 * The transaction-pooler options are checked at construction, before any network call: a
 * transaction-mode pooler rules out advisory mode (a session's locks) and LISTEN through it
 * (`listenUrl`, or `notifications: false`, is required), in code and in the store URL alike.
 * No engine is needed: the URLs point at a local socket that counts connections, and it must
 * see none.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresBackendOptions,
  parsePostgresUrl,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { createLocker, InvalidArgumentError } from '../../../packages/fencelock/src/index.js';

let server: Server;
let connections = 0;
let URL_: string;
let DIRECT: string;

let directServer: Server;

/** A local socket that counts the connections it gets (it must get none). */
async function countingServer(): Promise<[Server, number]> {
  const counting = createServer((socket) => {
    connections += 1;
    socket.destroy();
  });
  counting.listen(0, '127.0.0.1');
  await once(counting, 'listening');
  return [counting, (counting.address() as { port: number }).port];
}

beforeAll(async () => {
  let port: number;
  // The "pooler" of the store URL, and the "server" of listenUrl: two addresses.
  [server, port] = await countingServer();
  URL_ = `postgres://app:secret@127.0.0.1:${port}/app`;
  [directServer, port] = await countingServer();
  DIRECT = `postgres://app:secret@127.0.0.1:${port}/direct`;
});

afterAll(async () => {
  server.close();
  directServer.close();
  // Nothing connected, whatever was constructed or refused.
  expect(connections).toBe(0);
});

function invalid(build: () => unknown): InvalidArgumentError {
  let thrown: unknown;
  try {
    build();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(InvalidArgumentError);
  return thrown as InvalidArgumentError;
}

describe("PostgreSQL pooler: 'transaction' options", () => {
  it('with notifications on and no listenUrl: refused, naming both ways out', () => {
    for (const build of [
      () => createPostgresBackend({ url: URL_, pooler: 'transaction' }),
      () => createPostgresBackend({ url: `${URL_}?pooler=transaction` }),
      () => createPostgresBackend({ url: URL_, pooler: 'transaction', notifications: true }),
      () => createLocker(`${URL_}?pooler=transaction`),
      () => parsePostgresUrl(`${URL_}?pooler=transaction&notifications=true`),
    ]) {
      const error = invalid(build);
      expect(error.argument).toBe('listenUrl');
      expect(error.message).toMatch(/listenUrl|direct/);
      expect(error.message).toContain('notifications: false');
    }
  });

  it('advisory mode: refused (advisory locks need a session)', () => {
    for (const build of [
      () =>
        createPostgresBackend({
          url: URL_,
          mode: 'advisory',
          pooler: 'transaction',
          listenUrl: DIRECT,
        }),
      () => createLocker(`${URL_}?mode=advisory&pooler=transaction&notifications=false`),
      () => createPostgresBackend({ url: `${URL_}?mode=advisory`, pooler: 'transaction' }),
    ]) {
      const error = invalid(build);
      expect(error.argument).toBe('mode');
      expect(error.message).toMatch(/session/);
    }
  });

  it('bad pooler and listenUrl values: refused, without echoing the password', () => {
    expect(
      invalid(() => createPostgresBackend({ url: URL_, pooler: 'session' as 'transaction' }))
        .argument,
    ).toBe('pooler');
    expect(invalid(() => createLocker(`${URL_}?pooler=pgbouncer`)).argument).toBe('pooler');
    for (const listenUrl of [
      'http://app:secret@127.0.0.1/app',
      'not a url',
      `${DIRECT}?schema=other`,
      42 as unknown as string,
    ]) {
      const error = invalid(() =>
        createPostgresBackend({ url: URL_, pooler: 'transaction', listenUrl }),
      );
      expect(error.argument).toMatch(/^listenUrl/);
      expect(error.message).not.toContain('secret');
    }
    const viaUrl = invalid(() =>
      createLocker(`${URL_}?pooler=transaction&listenUrl=${encodeURIComponent('mysql://x/y')}`),
    );
    expect(viaUrl.argument).toBe('listenUrl');
  });

  it('a listenUrl naming the pooler itself: refused (LISTEN through it would hear nothing)', () => {
    const samePlace = URL_.replace('/app', '/other');
    for (const build of [
      () => createPostgresBackend({ url: URL_, pooler: 'transaction', listenUrl: samePlace }),
      () => createLocker(`${URL_}?pooler=transaction&listenUrl=${encodeURIComponent(samePlace)}`),
    ]) {
      const error = invalid(build);
      expect(error.argument).toBe('listenUrl');
      expect(error.message).toMatch(/not the pooler/);
      expect(error.message).not.toContain('secret');
    }
  });

  it('valid combinations construct without connecting', async () => {
    const valid: PostgresBackendOptions[] = [
      { url: URL_, pooler: 'transaction', listenUrl: DIRECT },
      { url: URL_, pooler: 'transaction', notifications: false },
      { url: `${URL_}?pooler=transaction`, listenUrl: DIRECT },
      { url: `${URL_}?pooler=transaction&listenUrl=${encodeURIComponent(DIRECT)}` },
      { url: `${URL_}?pooler=transaction&notifications=false` },
      { url: URL_, pooler: 'none', mode: 'advisory' },
      { url: URL_, listenUrl: DIRECT },
    ];
    for (const options of valid) await createPostgresBackend(options).close();
    const config = parsePostgresUrl(
      `${URL_}?pooler=transaction&listenUrl=${encodeURIComponent(DIRECT)}`,
    );
    expect(config).toMatchObject({ pooler: 'transaction', listenUrl: DIRECT });
    // fencelock's own parameters do not reach node-postgres.
    expect(config.connectionString).toBe(URL_);
    await createLocker(`${URL_}?pooler=transaction&notifications=false`).close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(connections).toBe(0);
  });
});
