import net from 'node:net';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { sqliteHarness } from '../handed/stores.js';
import { call, lockPath, openEvents, sleep, startInProcess, TOKEN } from './support.js';

function raw(url: string, text: string, waitMs = 800): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    let out = '';
    s.on('data', (d) => (out += d.toString()));
    s.on('error', () => resolve(out));
    s.write(text);
    setTimeout(() => { s.destroy(); resolve(out); }, waitMs);
  });
}
const first = (s: string) => s.split('\r\n\r\n').map((b) => b.slice(0, 300)).join('\n---\n').slice(0, 900);

let harness: ReturnType<typeof sqliteHarness>;
let sidecar: any; let url: string; let cookie: string;
beforeAll(async () => {
  harness = sqliteHarness();
  ({ sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}`, token: TOKEN }));
  const r = await fetch(`${url}/ui/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-proto': 'https' }, body: JSON.stringify({ token: TOKEN }) });
  console.log('SET-COOKIE (x-forwarded-proto https):', r.headers.get('set-cookie'));
  cookie = r.headers.get('set-cookie')!.split(';')[0]!;
});
afterAll(async () => { await sidecar.close(); await harness.close(); });

describe('break', () => {
  it('auth', async () => {
    const h = { cookie };
    for (const p of ['/v1/locks', '/v1/locks?prefix=', '/metrics', '/v1.0/metadata', '/ui/events', '/ui/api/history?key=a', '/ui/assets/app.js', '/ui/vendor/uPlot.iife.min.js', '/ui/vendor/package.json', '/ui/assets/../../../package.json', '/ui/vendor/uPlot.d.ts', '/ui/assets/index.html']) {
      const c = new AbortController();
      const r = await fetch(`${url}${p}`, { headers: h, signal: c.signal });
      console.log('COOKIE', p, r.status, r.headers.get('content-type'));
      c.abort();
    }
    const reqs = [
      'GET /ui/../v1/locks HTTP/1.1', 'GET /ui/%2e%2e/v1/locks HTTP/1.1', 'GET /ui/assets/..%2f..%2f..%2fpackage.json HTTP/1.1',
      'GET /ui/assets/%2e%2e/%2e%2e/routes/dashboard.ts HTTP/1.1', 'GET /ui/vendor/..%2fpackage.json HTTP/1.1',
      'POST /ui/assets/app.js HTTP/1.1', 'GET /UI/events HTTP/1.1', 'GET /ui//../metrics HTTP/1.1', 'GET //ui/events HTTP/1.1',
      'GET /ui;/../v1/locks HTTP/1.1', 'GET http://x/ui/../v1/locks HTTP/1.1', 'GET /ui/assets/app.js/ HTTP/1.1', 'OPTIONS /ui/events HTTP/1.1',
      'GET /ui/assets/%61pp.js HTTP/1.1', 'GET /ui%2f..%2fv1/locks HTTP/1.1', 'GET /ui/events%00 HTTP/1.1',
    ];
    for (const line of reqs) {
      const out = await raw(url, `${line}\r\nHost: x\r\nCookie: ${cookie}\r\nConnection: close\r\n\r\n`, 500);
      console.log('RAW', line, '=>', out.split('\r\n')[0], '|', out.split('\r\n\r\n')[1]?.slice(0, 120));
    }
  });

  it('bad input', async () => {
    const h = { cookie };
    const big = 'x'.repeat(1100);
    const paths = [
      '/ui/api/history', '/ui/api/history?key=', '/ui/api/history?key=a&key=b', '/ui/api/history?key=%00', `/ui/api/history?key=${big}`,
      '/ui/api/history?key=a&foo=1', '/ui/api/history?key=%E0%A4', '/ui/api/history?key=%ZZ', '/ui/api/history?key[]=a', '/ui/api/history?key[a]=1',
      '/ui/events?prefix=%00', '/ui/events?prefix=a&prefix=b', `/ui/events?prefix=${big}`, '/ui/events?x=1', '/ui/events?prefix=%E0%A4', '/ui/events?prefix=%ZZ',
      '/ui/api/elections/observe', '/ui/api/elections/observe?name=', '/ui/api/elections/observe?name=%00', `/ui/api/elections/observe?name=${big}`, '/ui/api/elections/observe?name=a&name=b', '/ui/api/elections/observe?name=%ZZ',
    ];
    for (const p of paths) {
      const c = new AbortController();
      const r = await fetch(`${url}${p}`, { headers: h, signal: c.signal });
      const t = r.headers.get('content-type')?.includes('event-stream') ? '(stream)' : await r.text();
      console.log('BAD', p.slice(0, 60), r.status, t.slice(0, 200));
      c.abort();
    }
    for (const [ct, body] of [['application/json', '{"token":1}'], ['application/json', '{}'], ['application/json', '[]'], ['application/json', 'null'], ['application/json', '{"token":"x","a":1}'], ['application/json', JSON.stringify({ token: 'x'.repeat(5000) })], ['text/plain', 'x'], ['application/x-www-form-urlencoded', 'token=x'], ['application/json', '{bad'], [null, '']] as const) {
      const r = await fetch(`${url}/ui/session`, { method: 'POST', headers: ct ? { 'content-type': ct } : {}, body });
      console.log('POST', ct, body.slice(0, 30), r.status, (await r.text()).slice(0, 200));
    }
    const d = await fetch(`${url}/ui/session`, { method: 'DELETE', headers: { cookie: 'fencelock_ui=%E0%A4; x' } });
    console.log('DELETE odd cookie', d.status, await d.text());
    const g = await fetch(`${url}/ui/session`, { headers: { cookie: 'fencelock_ui=%ZZ%' } });
    console.log('GET odd cookie', g.status, await g.text());
    const g2 = await fetch(`${url}/ui/events`, { headers: { cookie: 'fencelock_ui="; fencelock_ui=' } });
    console.log('GET odd cookie2', g2.status, (await g2.text()).slice(0, 100));
  });

  it('odd keys in history and stream', async () => {
    const keys = ['q"\'<img src=x onerror=alert(1)>', 'uni-ü-😀-\u202e', 'a\nb', 'a\u2028b', 'k'.repeat(1024), 'pct%41', 'sp ace'];
    const ev = await openEvents(url, '/ui/events?prefix=', { cookie });
    for (const key of keys) {
      const a = await call(url, lockPath(key, 'acquire'), { token: TOKEN, body: { owner: 'o<b>"', ttlMs: 30_000 } });
      console.log('ACQ', JSON.stringify(key).slice(0, 40), a.status, a.text.slice(0, 150));
      const hr = await fetch(`${url}/ui/api/history?key=${encodeURIComponent(key)}`, { headers: { cookie } });
      console.log('HIST', hr.status, (await hr.text()).slice(0, 200));
    }
    await sleep(1200);
    const locks = ev.named.filter((e) => e.event === 'locks').at(-1)?.data;
    console.log('LOCKS', JSON.stringify(locks?.locks.map((l: any) => [l.key.slice(0, 30), l.holders.map((h: any) => [h.owner, h.heldForMs, h.ttlMs])])));
    await ev.close();
  });
});
