/**
 * How large a request may be, bytes. One key's request is small; the multi-key routes carry up
 * to 1,000 keys (`MAX_MULTI_KEYS`) of up to 1,024 UTF-8 bytes each, with an owner and a token per
 * grant in `release-all`: about 1.2 MB when the keys need no JSON escaping.
 */

/** Every HTTP route but the multi-key ones. */
export const BODY_LIMIT_BYTES = 16 * 1024;

/**
 * `POST /v1/locks/acquire-all` and `/v1/locks/release-all`, and every gRPC call (grpc-js has one
 * limit per server, and `AcquireAll` / `ReleaseAll` need this one).
 */
export const MULTI_KEY_BODY_LIMIT_BYTES = 2 * 1024 * 1024;
