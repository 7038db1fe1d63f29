/**
 * The sidecar's loopback rule (a sidecar without a token listens only where nobody else can
 * reach it) and its bearer-token check, without a server or an engine.
 */
import { describe, expect, it } from 'vitest';
import { bearerChecker, isLoopbackHost } from '../../packages/cli/src/server/auth.js';

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

describe('bearerChecker', () => {
  const check = bearerChecker('test-token-0123456789abcdef');

  it('accepts exactly the token, with any case of "Bearer"', () => {
    expect(check('Bearer test-token-0123456789abcdef')).toBe(true);
    expect(check('bearer test-token-0123456789abcdef')).toBe(true);
  });

  it.each([
    [undefined, 'no header'],
    ['', 'an empty header'],
    ['test-token-0123456789abcdef', 'no scheme'],
    ['Basic test-token-0123456789abcdef', 'another scheme'],
    ['Bearer test-token-0123456789abcde', 'a prefix of the token'],
    ['Bearer test-token-0123456789abcdefx', 'the token and more'],
    ['Bearer TEST-TOKEN-0123456789ABCDEF', 'the token in another case'],
    ['Bearer test-token-0123456789abcdef extra', 'a second word'],
  ])('refuses %j (%s)', (header, _why) => {
    expect(check(header)).toBe(false);
  });
});
