/**
 * How large a request may be, bytes. One key's request is small; the multi-key routes carry up
 * to 1,000 keys (`MAX_MULTI_KEYS`) of up to 1,024 UTF-8 bytes each, with an owner and a token per
 * grant in `release-all`: about 1.2 MB when the keys need no JSON escaping. An election's campaign
 * and proclaim carry a value of up to 64 KiB of UTF-8 (`MAX_ELECTION_VALUE_BYTES`).
 */
import { MAX_ELECTION_VALUE_BYTES } from 'fencelock';

/** Every HTTP route but the multi-key ones. */
export const BODY_LIMIT_BYTES = 16 * 1024;

/**
 * `POST /v1/locks/acquire-all` and `/v1/locks/release-all`, and every gRPC call (grpc-js has one
 * limit per server, and `AcquireAll` / `ReleaseAll` need this one).
 */
export const MULTI_KEY_BODY_LIMIT_BYTES = 2 * 1024 * 1024;

/**
 * `POST /v1/elections/{name}/campaign` and `/proclaim`: a value of `MAX_ELECTION_VALUE_BYTES`
 * fits however JSON spells it (a control character takes 6 bytes, `\u0001`, for its 1 UTF-8
 * byte), with room for the other fields: 400 KiB.
 */
export const ELECTION_BODY_LIMIT_BYTES = 6 * MAX_ELECTION_VALUE_BYTES + BODY_LIMIT_BYTES;
