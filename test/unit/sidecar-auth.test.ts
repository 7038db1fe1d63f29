/**
 * The sidecar's loopback rule (a sidecar without a token listens only where nobody else can
 * reach it), its API-token check (a bearer token or Dapr's `dapr-api-token`) and the paths left
 * open, without a server or an engine.
 */
import { describe, expect, it } from 'vitest';
import { apiTokenChecker, isLoopbackHost, OPEN_PATHS } from '../../packages/cli/src/server/auth.js';

describe('isLoopbackHost', () => {
  it.each([
    '127.0.0.1',
    '127.0.0.53',
    '127.255.255.254',
    '::1',
    '[::1]',
    '0:0:0:0:0:0:0:1',
    '::ffff:127.0.0.1',
    'localhost',
    'LOCALHOST',
  ])('%s is loopback', (host) => {
    expect(isLoopbackHost(host)).toBe(true);
  });

  it.each([
    ['0.0.0.0', 'every IPv4 interface'],
    ['::', 'every interface'],
    ['[::]', 'every interface, bracketed'],
    ['192.168.1.20', 'a LAN address'],
    ['10.0.0.5', 'a private address'],
    ['fe80::1', 'a link-local IPv6 address'],
    ['::ffff:192.168.1.20', 'a LAN address, IPv4-mapped'],
    ['128.0.0.1', 'just past 127/8'],
    ['127.0.0.1.example.com', 'a name that starts like a loopback address'],
    ['localhost.example.com', 'a name that starts with localhost'],
    ['example.com', 'a host name'],
    ['', 'nothing'],
  ])('%s (%s) is not loopback', (host, _why) => {
    expect(isLoopbackHost(host)).toBe(false);
  });
});

describe('apiTokenChecker', () => {
  const TOKEN = 'test-token-0123456789abcdef';
  const check = apiTokenChecker(TOKEN);

  it('accepts exactly the token as a bearer token, with any case of "Bearer"', () => {
    expect(check({ authorization: `Bearer ${TOKEN}` })).toBe(true);
    expect(check({ authorization: `bearer ${TOKEN}` })).toBe(true);
  });

  it("accepts exactly the token in Dapr's dapr-api-token header", () => {
    expect(check({ daprApiToken: TOKEN })).toBe(true);
    // A wrong Dapr token does not hide a right bearer token, nor the other way round.
    expect(check({ daprApiToken: 'wrong', authorization: `Bearer ${TOKEN}` })).toBe(true);
    expect(check({ daprApiToken: TOKEN, authorization: 'Bearer wrong' })).toBe(true);
  });

  it.each([
    [undefined, 'no header'],
    ['', 'an empty header'],
    [TOKEN, 'no scheme'],
    [`Basic ${TOKEN}`, 'another scheme'],
    [`Bearer ${TOKEN.slice(0, -1)}`, 'a prefix of the token'],
    [`Bearer ${TOKEN}x`, 'the token and more'],
    [`Bearer ${TOKEN.toUpperCase()}`, 'the token in another case'],
    [`Bearer ${TOKEN} extra`, 'a second word'],
  ])('refuses the bearer header %j (%s)', (header, _why) => {
    expect(check({ authorization: header })).toBe(false);
  });

  it.each([
    ['', 'empty'],
    [`Bearer ${TOKEN}`, 'with a scheme'],
    [` ${TOKEN}`, 'with a space'],
    [`${TOKEN}, ${TOKEN}`, 'repeated (Node joins a repeated header with ", ")'],
    [[TOKEN, TOKEN], 'a gRPC metadata entry given twice'],
    [TOKEN.slice(0, -1), 'a prefix of the token'],
  ])('refuses the dapr-api-token %j (%s)', (value, _why) => {
    expect(check({ daprApiToken: value })).toBe(false);
  });
});

describe('OPEN_PATHS', () => {
  it("holds the health probes only, matched whole (Dapr's own bypass once matched substrings)", () => {
    expect([...OPEN_PATHS].sort()).toEqual(['/healthz', '/v1.0/healthz', '/v1.0/healthz/outbound']);
    expect(OPEN_PATHS.has('/v1.0/metadata?x=/healthz')).toBe(false);
    expect(OPEN_PATHS.has('/healthz/')).toBe(false);
  });
});
