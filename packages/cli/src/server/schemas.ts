/**
 * JSON schemas of the sidecar's requests and responses (validated by fastify's Ajv, with type
 * coercion off: `"1000"` is not a number), and the wording of each field's allowed range for
 * 400 answers. Durations: `ttlMs` and `waitMs` in milliseconds; Dapr's `expiryInSeconds` in
 * seconds. Fencing tokens travel as decimal strings (they may exceed 2^53).
 */
import {
  MAX_ELECTION_VALUE_BYTES,
  MAX_KEY_BYTES,
  MAX_LIST_PAGE_SIZE,
  MAX_LOCK_DELAY_MS,
  MAX_MULTI_KEYS,
  MAX_PERMITS,
  MAX_TIMER_MS,
  MIN_TTL_MS,
  ttlRule,
} from 'fencelock';

/** Longest TTL in whole seconds (Dapr's `expiryInSeconds`): the longest timer, in seconds. */
export const MAX_EXPIRY_SECONDS = Math.floor(MAX_TIMER_MS / 1000);
/** Longest accepted owner name (Dapr `lockOwner`, extension `owner`), characters. */
export const MAX_OWNER_CHARS = 1024;

/** Allowed range of each request field, as told in a 400 answer. */
export function allowedFor(field: string, maxWaitMs: number): string {
  // An element of a multi-key request: `keys[2]`, `grants[0].key`, `grants[0].fencingToken`.
  const element = /^(?:keys\[\d+\]|grants\[\d+\]\.(key|fencingToken))$/.exec(field);
  if (element) return allowedFor(element[1] ?? 'key', maxWaitMs);
  if (/^grants\[\d+\]$/.test(field)) return 'an object { key, fencingToken }';
  switch (field) {
    case 'expiryInSeconds':
      return `an integer number of seconds in [1, ${MAX_EXPIRY_SECONDS}]`;
    case 'ttlMs':
      return ttlRule();
    case 'waitMs':
      return `a number of milliseconds in [0, ${maxWaitMs}]`;
    case 'lockDelayMs':
      return `an integer number of milliseconds in [0, ${MAX_LOCK_DELAY_MS}]; above 0 only for a write lock or a campaign (not with permits or mode "read") on a store with lock-delay`;
    case 'resourceId':
    case 'name':
    case 'key':
      return `a well-formed string of 1 to ${MAX_KEY_BYTES} UTF-8 bytes without NUL`;
    case 'lockOwner':
    case 'owner':
      return `a well-formed string (no lone surrogate) of 1 to ${MAX_OWNER_CHARS} characters`;
    case 'fencingToken':
      return 'a decimal string of a fencing token, e.g. "42"';
    case 'term':
      return 'a decimal string of a leader\'s term (the fencing token of its grant), e.g. "42"';
    case 'value':
      return `a well-formed string without NUL of at most ${MAX_ELECTION_VALUE_BYTES} UTF-8 bytes`;
    case 'permits':
      return `an integer in [1, ${MAX_PERMITS}] (a semaphore's permit count)`;
    case 'mode':
      return `"write" or "read" (gRPC: LOCK_MODE_WRITE or LOCK_MODE_READ); "read" only on a store with read locks (not PostgreSQL's advisory mode), and not with permits`;
    case 'keys':
      return `an array of 1 to ${MAX_MULTI_KEYS} keys, each a well-formed string of 1 to ${MAX_KEY_BYTES} UTF-8 bytes without NUL`;
    case 'prefix':
      return `a key prefix of up to ${MAX_KEY_BYTES} UTF-8 bytes without NUL, taken literally`;
    case 'limit':
      return `an integer in [1, ${MAX_LIST_PAGE_SIZE}] (held keys per answer)`;
    case 'cursor':
      return 'the cursor of a previous answer of this sidecar';
    case 'store':
      return 'a store that can list its held locks';
    case 'grants':
      return `an array of 1 to ${MAX_MULTI_KEYS} grants { key, fencingToken } with distinct keys`;
    default:
      return 'a JSON object with the documented fields';
  }
}

const resourceId = { type: 'string', minLength: 1, maxLength: MAX_KEY_BYTES } as const;
/**
 * An owner name: no lone surrogate (Ajv compiles patterns with the `u` flag, where a surrogate
 * pair is one code point and only a lone surrogate is in `\p{Surrogate}`). A lone surrogate has
 * no UTF-8 form: hashed, it would give the owner id of the name with U+FFFD in its place.
 */
const ownerName = {
  type: 'string',
  minLength: 1,
  maxLength: MAX_OWNER_CHARS,
  pattern: '^\\P{Surrogate}*$',
} as const;
const ttlMs = { type: 'number', minimum: MIN_TTL_MS, maximum: MAX_TIMER_MS } as const;
const fencingToken = { type: 'string', pattern: '^[1-9][0-9]{0,38}$' } as const;
/** A semaphore's permit count: the request is for one of its permits instead of the lock. */
const permits = { type: 'integer', minimum: 1, maximum: MAX_PERMITS } as const;
/** Lock mode: `read` shares the key with other readers; `write` (the default) is exclusive. */
const mode = { type: 'string', enum: ['write', 'read'] } as const;
const lockDelayMs = { type: 'integer', minimum: 0, maximum: MAX_LOCK_DELAY_MS } as const;
/** A key in a request body (the path's keys are checked by the library). */
const bodyKey = { type: 'string', minLength: 1, maxLength: MAX_KEY_BYTES } as const;

/** Dapr `POST /v1.0-alpha1/lock/{storeName}`. Unknown fields are ignored, as Dapr does. */
export const daprLockSchema = {
  params: {
    type: 'object',
    properties: { storeName: { type: 'string', minLength: 1 } },
    required: ['storeName'],
  },
  body: {
    type: 'object',
    properties: {
      resourceId,
      lockOwner: ownerName,
      expiryInSeconds: { type: 'integer', minimum: 1, maximum: MAX_EXPIRY_SECONDS },
    },
    required: ['resourceId', 'lockOwner', 'expiryInSeconds'],
  },
  response: {
    200: {
      type: 'object',
      properties: { success: { type: 'boolean' } },
      required: ['success'],
    },
  },
} as const;

/** Dapr `POST /v1.0-alpha1/unlock/{storeName}`. */
export const daprUnlockSchema = {
  params: daprLockSchema.params,
  body: {
    type: 'object',
    properties: { resourceId, lockOwner: ownerName },
    required: ['resourceId', 'lockOwner'],
  },
  response: {
    200: {
      type: 'object',
      properties: { status: { type: 'integer' } },
      required: ['status'],
    },
  },
} as const;

const keyParams = {
  type: 'object',
  properties: { key: { type: 'string', minLength: 1 } },
  required: ['key'],
} as const;

const grantResponse = {
  type: 'object',
  properties: {
    key: { type: 'string' },
    owner: { type: 'string' },
    ownerId: { type: 'string' },
    fencingToken: { type: 'string' },
    ttlMs: { type: 'number' },
    permits: { type: 'integer' },
    mode: { type: 'string' },
  },
  required: ['key', 'owner', 'ownerId', 'fencingToken', 'ttlMs'],
} as const;

/** `POST /v1/locks/{key}/acquire`. */
export function acquireSchema(maxWaitMs: number) {
  return {
    params: keyParams,
    body: {
      type: 'object',
      properties: {
        owner: ownerName,
        ttlMs,
        waitMs: { type: 'number', minimum: 0, maximum: maxWaitMs },
        permits,
        mode,
        lockDelayMs,
      },
      required: ['ttlMs'],
      additionalProperties: false,
    },
    response: { 200: grantResponse },
  } as const;
}

/**
 * `POST /v1/locks/acquire-all`. `keys` must be an array (a string is refused, not locked per
 * character); each key's length in UTF-8 bytes and the rest of the library's key rule are
 * checked by the operation, before the store is asked anything.
 */
export function acquireAllSchema(maxWaitMs: number) {
  return {
    body: {
      type: 'object',
      properties: {
        keys: { type: 'array', minItems: 1, maxItems: MAX_MULTI_KEYS, items: bodyKey },
        owner: ownerName,
        ttlMs,
        waitMs: { type: 'number', minimum: 0, maximum: maxWaitMs },
        mode,
        lockDelayMs,
      },
      required: ['keys', 'ttlMs'],
      additionalProperties: false,
    },
    response: {
      200: {
        type: 'object',
        properties: { owner: { type: 'string' }, grants: { type: 'array', items: grantResponse } },
        required: ['owner', 'grants'],
      },
    },
  } as const;
}

/** `GET /v1/locks?prefix=…&limit=…&cursor=…` (the query's values are checked by the operation). */
export const listSchema = {
  querystring: {
    type: 'object',
    properties: {
      prefix: { type: 'string' },
      limit: { type: 'string' },
      cursor: { type: 'string' },
    },
    additionalProperties: false,
  },
} as const;

/** `POST /v1/locks/release-all`. */
export const releaseAllSchema = {
  body: {
    type: 'object',
    properties: {
      owner: ownerName,
      grants: {
        type: 'array',
        minItems: 1,
        maxItems: MAX_MULTI_KEYS,
        items: {
          type: 'object',
          properties: { key: bodyKey, fencingToken },
          required: ['key', 'fencingToken'],
          additionalProperties: false,
        },
      },
    },
    required: ['owner', 'grants'],
    additionalProperties: false,
  },
  response: {
    200: {
      type: 'object',
      properties: {
        outcomes: {
          type: 'array',
          items: {
            type: 'object',
            properties: { key: { type: 'string' }, outcome: { type: 'string' } },
            required: ['key', 'outcome'],
          },
        },
      },
      required: ['outcomes'],
    },
  },
} as const;

/** `POST /v1/locks/{key}/renew`. */
export const renewSchema = {
  params: keyParams,
  body: {
    type: 'object',
    properties: { owner: ownerName, fencingToken, ttlMs, permits },
    required: ['owner', 'fencingToken', 'ttlMs'],
    additionalProperties: false,
  },
  response: { 200: grantResponse },
} as const;

/** `POST /v1/locks/{key}/release`. */
export const releaseSchema = {
  params: keyParams,
  body: {
    type: 'object',
    properties: { owner: ownerName, fencingToken, permits },
    required: ['owner', 'fencingToken'],
    additionalProperties: false,
  },
  response: {
    200: {
      type: 'object',
      properties: { key: { type: 'string' }, outcome: { type: 'string' } },
      required: ['key', 'outcome'],
    },
  },
} as const;

/** `GET /v1/locks/{key}[?owner=name]`. */
export const inspectSchema = {
  params: keyParams,
  querystring: {
    type: 'object',
    properties: { owner: ownerName },
    additionalProperties: false,
  },
  response: {
    200: {
      type: 'object',
      properties: {
        key: { type: 'string' },
        holder: {
          type: ['object', 'null'],
          properties: {
            ownerId: { type: 'string' },
            fencingToken: { type: 'string' },
            ttlMs: { type: 'number' },
          },
          required: ['ownerId', 'fencingToken', 'ttlMs'],
        },
        lastFencingToken: { type: 'string' },
        heldByOwner: { type: 'boolean' },
      },
      required: ['key', 'holder', 'lastFencingToken'],
    },
  },
} as const;

/** Request bodies, as validated by the schemas above. */
export interface DaprLockBody {
  readonly resourceId: string;
  readonly lockOwner: string;
  readonly expiryInSeconds: number;
}
export interface DaprUnlockBody {
  readonly resourceId: string;
  readonly lockOwner: string;
}
export interface AcquireBody {
  readonly owner?: string;
  readonly ttlMs: number;
  readonly waitMs?: number;
  readonly permits?: number;
  readonly mode?: 'write' | 'read';
  readonly lockDelayMs?: number;
}
export interface AcquireAllBody {
  readonly keys: readonly string[];
  readonly owner?: string;
  readonly ttlMs: number;
  readonly waitMs?: number;
  readonly mode?: 'write' | 'read';
  readonly lockDelayMs?: number;
}
export interface ReleaseAllBody {
  readonly owner: string;
  readonly grants: readonly { readonly key: string; readonly fencingToken: string }[];
}
export interface RenewBody {
  readonly owner: string;
  readonly fencingToken: string;
  readonly ttlMs: number;
  readonly permits?: number;
}
export interface ReleaseBody {
  readonly owner: string;
  readonly fencingToken: string;
  readonly permits?: number;
}

const nameParams = {
  type: 'object',
  properties: { name: { type: 'string', minLength: 1 } },
  required: ['name'],
} as const;
/** A leader's term: a fencing token, as a decimal string. */
const term = fencingToken;
/**
 * A candidate's value: its rule (well-formed, no NUL, at most 64 KiB of UTF-8) is the library's,
 * checked by the operation, which names it in full.
 */
const value = { type: 'string' } as const;

const leadershipResponse = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    owner: { type: 'string' },
    ownerId: { type: 'string' },
    term: { type: 'string' },
    ttlMs: { type: 'number' },
    value: { type: 'string' },
  },
  required: ['name', 'owner', 'ownerId', 'term', 'ttlMs'],
} as const;

const electionOutcomeResponse = {
  type: 'object',
  properties: { name: { type: 'string' }, outcome: { type: 'string' } },
  required: ['name', 'outcome'],
} as const;

/** `POST /v1/elections/{name}/campaign`. */
export function campaignSchema(maxWaitMs: number) {
  return {
    params: nameParams,
    body: {
      type: 'object',
      properties: {
        owner: ownerName,
        value,
        ttlMs,
        waitMs: { type: 'number', minimum: 0, maximum: maxWaitMs },
        lockDelayMs,
      },
      required: ['value', 'ttlMs'],
      additionalProperties: false,
    },
    response: { 200: leadershipResponse },
  } as const;
}

/** `POST /v1/elections/{name}/renew`. */
export const renewLeadershipSchema = {
  params: nameParams,
  body: {
    type: 'object',
    properties: { owner: ownerName, term, ttlMs },
    required: ['owner', 'term', 'ttlMs'],
    additionalProperties: false,
  },
  response: { 200: leadershipResponse },
} as const;

/** `POST /v1/elections/{name}/proclaim`. */
export const proclaimSchema = {
  params: nameParams,
  body: {
    type: 'object',
    properties: { owner: ownerName, term, value },
    required: ['owner', 'term', 'value'],
    additionalProperties: false,
  },
  response: { 200: electionOutcomeResponse },
} as const;

/** `POST /v1/elections/{name}/resign`. */
export const resignSchema = {
  params: nameParams,
  body: {
    type: 'object',
    properties: { owner: ownerName, term },
    required: ['owner', 'term'],
    additionalProperties: false,
  },
  response: { 200: electionOutcomeResponse },
} as const;

const leaderResponse = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    leader: {
      type: ['object', 'null'],
      properties: {
        ownerId: { type: 'string' },
        term: { type: 'string' },
        value: { type: 'string' },
        ttlMs: { type: 'number' },
        candidates: { type: 'integer' },
      },
      required: ['ownerId', 'term', 'value', 'ttlMs', 'candidates'],
    },
  },
  required: ['name', 'leader'],
} as const;

/** `GET /v1/elections/{name}`. */
export const leaderSchema = {
  params: nameParams,
  querystring: { type: 'object', properties: {}, additionalProperties: false },
  response: { 200: leaderResponse },
} as const;

/** `GET /v1/elections/{name}/observe` (Server-Sent Events; no response schema). */
export const observeSchema = {
  params: nameParams,
  querystring: { type: 'object', properties: {}, additionalProperties: false },
} as const;

export interface CampaignBody {
  readonly owner?: string;
  readonly value: string;
  readonly ttlMs: number;
  readonly waitMs?: number;
  readonly lockDelayMs?: number;
}
export interface RenewLeadershipBody {
  readonly owner: string;
  readonly term: string;
  readonly ttlMs: number;
}
export interface ProclaimBody {
  readonly owner: string;
  readonly term: string;
  readonly value: string;
}
export interface ResignBody {
  readonly owner: string;
  readonly term: string;
}
