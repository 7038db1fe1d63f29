/**
 * Owner names of sidecar callers (Dapr's `lockOwner`, the extension's `owner`) mapped to backend
 * owner ids.
 *
 * The backend contract wants an owner id of at least 128 bits in hex for each holder of a key
 * (etcd and ZooKeeper put it in key and node names, and track a contender by it), while a Dapr
 * caller picks any string and may use the same one for several resources. The sidecar keeps no
 * table: it derives the id from the name and the key, the same way in every sidecar process, so
 * any sidecar over the same store can renew, release or inspect what another one granted:
 *
 *     ownerId = first 32 hex digits of SHA-256(
 *       "fencelock/sidecar-owner/v1\n" + <UTF-8 byte length of name> + "\n" + name + key)
 *
 * The key is part of it so that one name holding several keys is several contenders to the
 * engine; the length prefix keeps (name, key) pairs from running together; the namespace keeps
 * these ids apart from the random ids of library callers (and from a caller's ids as an election
 * candidate, `candidateIdFor`, which hash under their own namespace). Names must be well-formed UTF-16 (no
 * lone surrogate): a lone surrogate has no UTF-8 form and would be hashed as U+FFFD, so "\ud800"
 * and "\ufffd" would be the same owner. The id is only as secret as the name:
 * whoever knows a caller's `lockOwner` can release its locks, as in Dapr, so callers should use
 * an unguessable name per holder (Dapr asks for one per request).
 */
import { createHash, randomBytes } from 'node:crypto';
import { InvalidArgumentError } from 'fencelock';

/** Namespace hashed in front of every owner name (version 1 of the mapping). */
export const OWNER_NAMESPACE = 'fencelock/sidecar-owner/v1\n';

/**
 * The backend owner id (32 lowercase hex digits, 128 bits) of owner name `name` on `key`.
 * @throws InvalidArgumentError (argument `owner`) for a name that is not a string or not
 *   well-formed UTF-16 (a lone surrogate): such a name would share its id with the name that has
 *   U+FFFD in its place.
 */
export function ownerIdFor(name: string, key: string): string {
  if (!isWellFormedOwnerName(name)) {
    throw new InvalidArgumentError('owner', 'a well-formed string (no lone surrogate)', name);
  }
  return createHash('sha256')
    .update(OWNER_NAMESPACE)
    .update(`${Buffer.byteLength(name, 'utf8')}\n`)
    .update(name, 'utf8')
    .update(key, 'utf8')
    .digest('hex')
    .slice(0, 32);
}

/**
 * Namespace hashed in front of the owner names of election candidates (version 1): a caller's
 * id as a candidate of election `name` is never its id as a holder of the lock `name`, so that
 * the engine sees two contenders, and a lock's release cannot name a leadership or the reverse.
 */
export const ELECTION_OWNER_NAMESPACE = 'fencelock/sidecar-candidate/v1\n';

/**
 * The backend owner id (32 lowercase hex digits) of owner name `name` as a candidate of the
 * election `election`: `ownerIdFor`'s derivation under `ELECTION_OWNER_NAMESPACE`.
 * @throws InvalidArgumentError as `ownerIdFor`.
 */
export function candidateIdFor(name: string, election: string): string {
  if (!isWellFormedOwnerName(name)) {
    throw new InvalidArgumentError('owner', 'a well-formed string (no lone surrogate)', name);
  }
  return createHash('sha256')
    .update(ELECTION_OWNER_NAMESPACE)
    .update(`${Buffer.byteLength(name, 'utf8')}\n`)
    .update(name, 'utf8')
    .update(election, 'utf8')
    .digest('hex')
    .slice(0, 32);
}

/**
 * Whether `name` can be an owner name: a string that is well-formed UTF-16 (no lone surrogate),
 * so that its UTF-8 form, which the id hashes, is one-to-one with it.
 */
export function isWellFormedOwnerName(name: unknown): name is string {
  return typeof name === 'string' && !LONE_SURROGATE.test(name);
}

/** In a `u` regular expression a surrogate pair is one code point: only a lone one matches. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/** A fresh, unguessable owner name for a caller that did not give one (32 hex digits). */
export function newOwnerName(): string {
  return randomBytes(16).toString('hex');
}
