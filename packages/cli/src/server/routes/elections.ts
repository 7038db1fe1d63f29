/**
 * Leader elections under `/v1/elections/{name}` (the name URL-encoded, a lock key's rule): the
 * library's `locker.election(name)`, owner-addressed as the `/v1/locks` routes are
 * (election-operations.ts). The term of a leadership is its fencing token, a decimal string.
 *
 * - `POST /v1/elections/{name}/campaign` `{ owner?, value, ttlMs, waitMs? }` waits server-side
 *   (`waitMs`, at most and by default the sidecar's `--max-wait`; 0: one attempt; a caller that
 *   hangs up leaves the line) → `{ name, owner, ownerId, term, ttlMs, value }`.
 * - `POST /v1/elections/{name}/renew` `{ owner, term, ttlMs }` → `{ name, owner, ownerId, term,
 *   ttlMs }`; `/proclaim` `{ owner, term, value }` → `{ name, outcome: 'proclaimed' }`; `/resign`
 *   `{ owner, term }` → `{ name, outcome: 'released' }`. Refused: 404 `ERR_LOCK_NOT_HELD` /
 *   409 `ERR_NOT_LOCK_OWNER` with `outcome`, as renew / release of a lock.
 * - `GET /v1/elections/{name}` → `{ name, leader: { ownerId, term, value, ttlMs, candidates } |
 *   null }` (`candidates`: the leader and the candidates waiting in line).
 * - `GET /v1/elections/{name}/observe`: Server-Sent Events, one `data:` line of that JSON per
 *   change (the current leader first), a `: heartbeat` comment every 15 s, an `event: error`
 *   with the error body if the engine fails; the watch ends when the caller disconnects.
 *
 * Campaign and proclaim take bodies up to `ELECTION_BODY_LIMIT_BYTES` (a 64 KiB value however
 * JSON escapes it).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ELECTION_BODY_LIMIT_BYTES } from '../body-limits.js';
import { recountCandidates } from '../candidate-recount.js';
import {
  campaign,
  type LeaderAnswer,
  leader,
  observeLeaders,
  proclaim,
  renewLeadership,
  resign,
} from '../election-operations.js';
import { HttpError } from '../http-errors.js';
import {
  type CampaignBody,
  campaignSchema,
  leaderSchema,
  observeSchema,
  type ProclaimBody,
  proclaimSchema,
  type RenewLeadershipBody,
  type ResignBody,
  renewLeadershipSchema,
  resignSchema,
} from '../schemas.js';
import type { RouteContext } from './context.js';
import { openEventStream, whenGone } from './event-stream.js';
import { untilHungUp } from './locks.js';

type NameParams = { Params: { name: string } };

/** Register the `/v1/elections` routes (the operations are `election-operations.ts`). */
export function registerElectionRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post<NameParams & { Body: CampaignBody }>(
    '/v1/elections/:name/campaign',
    { schema: campaignSchema(ctx.maxWaitMs), bodyLimit: ELECTION_BODY_LIMIT_BYTES },
    async (request, reply) =>
      untilHungUp(reply, (signal) =>
        campaign(ctx, { name: request.params.name, ...request.body, signal }),
      ),
  );

  app.post<NameParams & { Body: RenewLeadershipBody }>(
    '/v1/elections/:name/renew',
    { schema: renewLeadershipSchema },
    async (request) => renewLeadership(ctx, { name: request.params.name, ...request.body }),
  );

  app.post<NameParams & { Body: ProclaimBody }>(
    '/v1/elections/:name/proclaim',
    { schema: proclaimSchema, bodyLimit: ELECTION_BODY_LIMIT_BYTES },
    async (request) => proclaim(ctx, { name: request.params.name, ...request.body }),
  );

  app.post<NameParams & { Body: ResignBody }>(
    '/v1/elections/:name/resign',
    { schema: resignSchema },
    async (request) => resign(ctx, { name: request.params.name, ...request.body }),
  );

  app.get<NameParams>('/v1/elections/:name', { schema: leaderSchema }, async (request) =>
    leader(ctx, { name: request.params.name }),
  );

  app.get<NameParams>(
    '/v1/elections/:name/observe',
    { schema: observeSchema },
    async (request, reply) => streamLeaderChanges(ctx, request, reply, request.params.name),
  );
}

/**
 * Answer `request` with the leader changes of election `name` as Server-Sent Events: one `data:`
 * line of `{ name, leader }` per change (the current leader first), a `: heartbeat` comment every
 * `SSE_HEARTBEAT_MS`, an `event: error` with the error body if the engine fails; the watch ends
 * when the caller disconnects or the sidecar shuts down. An error before the first answer (bad
 * name, a store without elections, an engine that does not answer) is a JSON answer instead.
 * With `recountEveryMs`, the leader is also read again that often, and a new count of its
 * candidates sent as a change (candidate-recount.ts).
 */
export async function streamLeaderChanges(
  ctx: RouteContext,
  request: FastifyRequest,
  reply: FastifyReply,
  name: string,
  options: { readonly recountEveryMs?: number } = {},
): Promise<void> {
  const gone = new AbortController();
  const stopWatching = whenGone(request, reply, () => gone.abort());
  const leaders: AsyncGenerator<LeaderAnswer, void, undefined> = observeLeaders(ctx, {
    name,
    signal: gone.signal,
  });
  // The first answer before the stream: bad input, a store without elections or an engine
  // that does not answer are the request's error (a JSON answer, as on every route).
  let first: IteratorResult<LeaderAnswer, void>;
  try {
    first = await leaders.next();
    if (first.done) {
      throw new HttpError(503, {
        errorCode: 'ERR_SHUTTING_DOWN',
        message: 'the sidecar is shutting down',
      });
    }
  } catch (error) {
    stopWatching();
    throw error;
  }
  const { stream, send, stopHeartbeat } = openEventStream(reply);
  let lastSent = first.value;
  const sendLeader = (answer: LeaderAnswer) => {
    lastSent = answer;
    send(answer);
  };
  sendLeader(lastSent);
  const stopRecount =
    options.recountEveryMs === undefined
      ? () => {}
      : recountCandidates(
          () => leader(ctx, { name }),
          () => lastSent,
          sendLeader,
          options.recountEveryMs,
        );
  try {
    for (;;) {
      const next = await leaders.next();
      if (next.done) break;
      sendLeader(next.value);
    }
  } catch (error) {
    const { body } = ctx.answer(error, request);
    send(body, 'error');
  } finally {
    stopRecount();
    stopHeartbeat();
    stopWatching();
    await leaders.return(undefined);
    stream.end();
  }
}
