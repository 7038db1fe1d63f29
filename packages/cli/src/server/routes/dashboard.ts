/**
 * The dashboard at `/ui`: a page and its assets (shipped in the package, uPlot for the charts,
 * nothing from a CDN), its sign-in, and the read-only data it draws:
 *
 * - `GET /ui` the page; `GET /ui/assets/*` its script and styles; `GET /ui/vendor/*` uPlot.
 *   Open to all: they hold no data.
 * - `GET /ui/session` → `{ tokenRequired, signedIn }` (signed in: a session cookie or the token;
 *   always without a sidecar token); `POST /ui/session` `{ token }` → 204 and a session cookie
 *   (ui-sessions.ts), 401 for a wrong token; `DELETE /ui/session` signs out.
 * - `GET /ui/events?prefix=` Server-Sent Events: `hello` (the store's name, the Dapr store name,
 *   the version, the prefix, the chart buckets and window), then `locks` (a `LocksSnapshot` of the held keys under the prefix, about every
 *   `WATCH_INTERVAL_MS`), `history` (`{ key, entry }` for each new history entry under the
 *   prefix) and `health` (the `HealthSeries` of every store, every `HEALTH_PUSH_MS`).
 * - `GET /ui/api/history?key=` → `{ key, entries }`, the key's recent history.
 * - `GET /ui/api/elections/observe?name=` the leader changes of an election, as
 *   `GET /v1/elections/{name}/observe` streams them, and a change of its count of candidates
 *   within `CANDIDATES_RECOUNT_MS`.
 *
 * The data routes take the sidecar's token (as the API) or a dashboard session cookie; the
 * cookie opens nothing else (`dashboardAccess`), and the streams it opened end with its session. At most `MAX_DASHBOARD_STREAMS` event streams
 * and `MAX_WATCHED_PREFIXES` listed prefixes at once: beyond, 429 `ERR_TOO_MANY_STREAMS`.
 */
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { validateKey } from 'fencelock';
import { packageVersion } from '../../version.js';
import { type CarriedToken, DAPR_API_TOKEN_HEADER } from '../auth.js';
import { CANDIDATES_RECOUNT_MS } from '../candidate-recount.js';
import {
  type Dashboard,
  MAX_DASHBOARD_STREAMS,
  MAX_WATCHED_PREFIXES,
} from '../dashboard/dashboard.js';
import { BUCKET_MS, WINDOW_MS } from '../dashboard/health-timeline.js';
import { fromLockError, HttpError } from '../http-errors.js';
import type { RouteContext } from './context.js';
import { streamLeaderChanges } from './elections.js';
import { openEventStream, whenGone } from './event-stream.js';

/** Interval of the `health` events, ms. */
export const HEALTH_PUSH_MS = 1_000;

const UI_DIR = fileURLToPath(new URL('../dashboard/ui/', import.meta.url));
const UPLOT_DIR = dirname(createRequire(import.meta.url).resolve('uplot/dist/uPlot.iife.min.js'));

/** Who may make a request to a dashboard path: anyone, a session or token holder, or not ours. */
export function dashboardAccess(
  method: string,
  url: string,
): 'open' | 'session-or-token' | 'not-dashboard' {
  const path = url.split('?')[0]!;
  if (path !== '/ui' && !path.startsWith('/ui/')) return 'not-dashboard';
  const shell =
    (method === 'GET' || method === 'HEAD') &&
    (path === '/ui' ||
      path === '/ui/' ||
      path.startsWith('/ui/assets/') ||
      path.startsWith('/ui/vendor/'));
  // `/ui/session`: sign in, sign out, and whether the request is signed in (never a 401, so the
  // page asks without an error in the browser's console).
  if (shell || path === '/ui/session') return 'open';
  return 'session-or-token';
}

/**
 * Register the dashboard's routes.
 * @param checkToken the sidecar's token check (`apiTokenChecker`); undefined: the sidecar has no
 *   token, and nothing to sign in to.
 */
export function registerDashboardRoutes(
  app: FastifyInstance,
  ctx: RouteContext,
  dashboard: Dashboard,
  checkToken: ((carried: CarriedToken) => boolean) | undefined,
): void {
  void app.register(fastifyStatic, {
    root: UI_DIR,
    prefix: '/ui/assets/',
    index: false,
    wildcard: false,
  });
  void app.register(fastifyStatic, {
    root: UPLOT_DIR,
    prefix: '/ui/vendor/',
    index: false,
    wildcard: false,
    decorateReply: false,
  });
  const page = (_request: FastifyRequest, reply: FastifyReply) =>
    reply.sendFile('index.html', UI_DIR);
  app.get('/ui', page);
  app.get('/ui/', page);

  app.get('/ui/session', async (request) => ({
    tokenRequired: checkToken !== undefined,
    signedIn:
      checkToken === undefined ||
      dashboard.sessions.valid(request.headers.cookie) ||
      checkToken({
        authorization: request.headers.authorization,
        daprApiToken: request.headers[DAPR_API_TOKEN_HEADER],
      }),
  }));
  app.post<{ Body: { token: string } }>(
    '/ui/session',
    {
      schema: {
        body: {
          type: 'object',
          required: ['token'],
          properties: { token: { type: 'string', maxLength: 4096 } },
          additionalProperties: false,
        },
      },
    },
    async (request, reply) => {
      if (checkToken !== undefined && !checkToken({ daprApiToken: request.body.token })) {
        throw new HttpError(401, { errorCode: 'ERR_UNAUTHORIZED', message: 'wrong API token' });
      }
      if (checkToken !== undefined) {
        // Behind a TLS-terminating proxy (fastify trusts no proxy here, so its `protocol` stays
        // http): its x-forwarded-proto. A client that forges it only gets a cookie its browser
        // keeps off plain HTTP.
        const forwarded = request.headers['x-forwarded-proto'];
        const secure =
          request.protocol === 'https' ||
          (typeof forwarded === 'string' && forwarded.split(',')[0]!.trim() === 'https');
        reply.header('set-cookie', dashboard.sessions.open(secure));
      }
      return reply.code(204).send();
    },
  );
  app.delete('/ui/session', async (request, reply) => {
    reply.header('set-cookie', dashboard.sessions.close(request.headers.cookie));
    return reply.code(204).send();
  });

  app.get<{ Querystring: { key: string } }>(
    '/ui/api/history',
    {
      schema: {
        querystring: {
          type: 'object',
          required: ['key'],
          properties: { key: { type: 'string' } },
          additionalProperties: false,
        },
      },
    },
    async (request) => {
      const key = checked(ctx, () => validateKey(request.query.key));
      return { key, entries: dashboard.history.of(key) };
    },
  );

  app.get<{ Querystring: { name: string } }>(
    '/ui/api/elections/observe',
    {
      schema: {
        querystring: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string' } },
          additionalProperties: false,
        },
      },
    },
    async (request, reply) => {
      const counted = counting(dashboard.openStream());
      whenGone(request, reply, counted);
      endWithSession(dashboard, request, reply);
      try {
        await streamLeaderChanges(ctx, request, reply, request.query.name, {
          recountEveryMs: CANDIDATES_RECOUNT_MS,
        });
      } catch (error) {
        counted();
        throw error;
      }
    },
  );

  app.get<{ Querystring: { prefix?: string } }>(
    '/ui/events',
    {
      schema: {
        querystring: {
          type: 'object',
          properties: { prefix: { type: 'string' } },
          additionalProperties: false,
        },
      },
    },
    async (request, reply) => {
      const prefix = request.query.prefix ?? '';
      if (prefix !== '') checked(ctx, () => validateKey(prefix, 'prefix'));
      const counted = counting(dashboard.openStream(prefix));
      endWithSession(dashboard, request, reply);
      const events = openEventStream(reply);
      const { stream, send, stopHeartbeat } = events;
      // A listing or health series the client has not read yet is superseded by the next one.
      const sendLatest = (data: unknown, event: string) => {
        if (!events.behind) send(data, event);
      };
      const hello = {
        store: ctx.locker.name,
        storeName: ctx.storeName,
        version: packageVersion(),
        prefix,
        bucketMs: BUCKET_MS,
        windowMs: WINDOW_MS,
      };
      send(hello, 'hello');
      const sendHealth = () => sendLatest(dashboard.timeline.series(), 'health');
      sendHealth();
      const stops = [
        dashboard.watch.watch(prefix, (snapshot) => sendLatest(snapshot, 'locks')),
        dashboard.history.subscribe((key, entry) => {
          if (key.startsWith(prefix)) send({ key, entry }, 'history');
        }),
      ];
      const health = setInterval(sendHealth, HEALTH_PUSH_MS);
      const end = () => {
        counted();
        clearInterval(health);
        stopHeartbeat();
        for (const stop of stops) stop();
        ctx.shutdown.removeEventListener('abort', end);
        stream.end();
      };
      whenGone(request, reply, end);
      ctx.shutdown.addEventListener('abort', end, { once: true });
    },
  );
}

/**
 * The end of a stream's count, or a 429 `ERR_TOO_MANY_STREAMS` when the dashboard serves
 * `MAX_DASHBOARD_STREAMS` already, or lists `MAX_WATCHED_PREFIXES` other prefixes.
 */
function counting(opened: ReturnType<Dashboard['openStream']>): () => void {
  if (typeof opened === 'function') return opened;
  throw new HttpError(429, {
    errorCode: 'ERR_TOO_MANY_STREAMS',
    message:
      opened === 'streams'
        ? `the dashboard serves ${MAX_DASHBOARD_STREAMS} event streams already; close one`
        : `the dashboard lists ${MAX_WATCHED_PREFIXES} prefixes already; watch one of those or close one`,
  });
}

/**
 * Cut off the stream of `reply` when the sign-in session it was opened with ends (sign-out,
 * expiry, eviction): its connection is closed, which ends it as a client's hang-up does, and the
 * browser's reconnection is refused. A stream opened with the API token is not watched.
 */
function endWithSession(dashboard: Dashboard, request: FastifyRequest, reply: FastifyReply): void {
  const stop = dashboard.sessions.whenEnded(request.headers.cookie, () => reply.raw.destroy());
  whenGone(request, reply, stop);
}

/** Run a check of the core (`validateKey`), its error answered as a 400 naming the field. */
function checked<T>(ctx: RouteContext, check: () => T): T {
  try {
    return check();
  } catch (error) {
    throw fromLockError(error, {}, ctx.allowed, false);
  }
}
