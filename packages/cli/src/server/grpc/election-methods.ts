/**
 * The leader-election methods of `fencelock.v1.Locks`: the gRPC form of the
 * `/v1/elections/{name}` routes, on the same operations (`election-operations.ts`). Campaign
 * waits server-side (ended by the caller's cancel or deadline, as Acquire); RenewLeadership,
 * Proclaim, Resign and Leader are unary; Observe streams the leaders as they change until the
 * caller cancels or the sidecar shuts down. An empty `owner` in Campaign asks for a random one;
 * an unset `wait_ms` (proto3 `optional`) waits up to the sidecar's longest wait. "Nobody leads" is
 * an unset `leader`.
 */
import {
  campaign,
  type LeaderAnswer,
  leader,
  observeLeaders,
  proclaim,
  renewLeadership,
  resign,
} from '../election-operations.js';
import type { LockOperationsContext } from '../lock-operations.js';
import type { StreamWork, UnaryWork } from './service-methods.js';

interface CampaignRequest {
  readonly name: string;
  readonly owner: string;
  readonly value: string;
  readonly ttlMs: number;
  /** Undefined when unset (proto3 `optional`). */
  readonly waitMs?: number | undefined;
  /** 0: none. */
  readonly lockDelayMs: number;
}

interface RenewLeadershipRequest {
  readonly name: string;
  readonly owner: string;
  readonly term: string;
  readonly ttlMs: number;
}

interface ProclaimRequest {
  readonly name: string;
  readonly owner: string;
  readonly term: string;
  readonly value: string;
}

interface ResignRequest {
  readonly name: string;
  readonly owner: string;
  readonly term: string;
}

interface LeaderRequest {
  readonly name: string;
}

/** A leader in the .proto's shape: an unset message field says that nobody leads. */
function leaderMessage(answer: LeaderAnswer): object {
  return answer.leader === null ? { name: answer.name, leader: undefined } : answer;
}

/** The election methods of `fencelock.v1.Locks`, unary and streaming. */
export function electionMethods(ctx: LockOperationsContext): {
  readonly methods: Readonly<Record<string, UnaryWork>>;
  readonly streams: Readonly<Record<string, StreamWork>>;
} {
  return {
    methods: {
      async Campaign(request: CampaignRequest, signal) {
        return campaign(ctx, {
          name: request.name,
          owner: request.owner === '' ? undefined : request.owner,
          value: request.value,
          ttlMs: request.ttlMs,
          waitMs: request.waitMs ?? undefined,
          lockDelayMs: request.lockDelayMs,
          signal,
        });
      },
      async RenewLeadership(request: RenewLeadershipRequest) {
        return renewLeadership(ctx, request);
      },
      async Proclaim(request: ProclaimRequest) {
        return proclaim(ctx, request);
      },
      async Resign(request: ResignRequest) {
        return resign(ctx, request);
      },
      async Leader(request: LeaderRequest) {
        return leaderMessage(await leader(ctx, request));
      },
    },
    streams: {
      async Observe(request: LeaderRequest, signal, write) {
        for await (const answer of observeLeaders(ctx, { name: request.name, signal })) {
          write(leaderMessage(answer));
        }
      },
    },
  };
}
