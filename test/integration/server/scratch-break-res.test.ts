import net from 'node:net';
import { afterEach, describe, it, vi } from 'vitest';
import { sqliteHarness } from '../handed/stores.js';
import { call, lockPath, openEvents, sleep, startInProcess, TOKEN, trackIntervals } from './support.js';
import { HEALTH_PUSH_MS } from '../../../packages/cli/src/server/routes/dashboard.js';
import { SSE_HEARTBEAT_MS } from '../../../packages/cli/src/server/routes/event-stream.js';

afterEach(() => vi.restoreAllMocks());

describe('break res', () => {
  it('pipelined streams on a socket that goes away', async () => {
    const timersLeft = trackIntervals([HEALTH_PUSH_MS, SSE_HEARTBEAT_MS]);
    const harness = sqliteHarness();
    const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}`, token: TOKEN });
    try {
      const u = new URL(url);
      const s = net.connect(Number(u.port), u.hostname);
      await new Promise((r) => s.once('connect', r));
      let got = '';
      s.on('data', (d) => (got += d));
      let text = '';
      for (let i = 0; i < 64; i++) text += `GET /ui/events?prefix=pipe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`;
      s.write(text);
      await sleep(1500);
      console.log('timers while open', timersLeft(), 'bytes', got.length);
      s.destroy();
      await sleep(1500);
      console.log('timers after socket destroyed', timersLeft());
      const next = await call(url, '/ui/events?prefix=other', { token: TOKEN, signal: AbortSignal.timeout(1000) }).catch((e) => ({ status: String(e) }));
      console.log('new stream after socket gone', next.status, (next as any).text?.slice(0, 150));
    } finally {
      const t0 = Date.now();
      await sidecar.close();
      console.log('close took', Date.now() - t0, 'timers after close', timersLeft());
      await harness.close();
    }
  }, 30_000);

  it('a client that does not read', async () => {
    const harness = sqliteHarness();
    const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}`, token: TOKEN });
    const socks: net.Socket[] = [];
    sidecar.app.server.on('connection', (c: net.Socket) => socks.push(c));
    try {
      for (let i = 0; i < 300; i++) {
        await call(url, lockPath(`slow:${i}:${'k'.repeat(1000)}`, 'acquire'), { token: TOKEN, body: { owner: `owner-${i}`, ttlMs: 120_000 } });
      }
      const u = new URL(url);
      const clients: net.Socket[] = [];
      for (let j = 0; j < 4; j++) {
        const s = net.connect(Number(u.port), u.hostname);
        await new Promise((r) => s.once('connect', r));
        s.pause();
        s.write(`GET /ui/events?prefix=slow: HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
        clients.push(s);
      }
      const rss0 = process.memoryUsage().rss;
      for (let t = 0; t < 5; t++) {
        await sleep(4000);
        const buffered = socks.map((c) => c.writableLength).filter((n) => n > 0);
        console.log(`t=${(t + 1) * 4}s server-side buffered per socket`, buffered, 'rss +MB', Math.round((process.memoryUsage().rss - rss0) / 1e6));
      }
      for (const c of clients) c.destroy();
    } finally {
      await sidecar.close();
      await harness.close();
    }
  }, 60_000);
});
