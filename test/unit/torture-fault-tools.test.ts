/**
 * The pure parts of the torture faults' tools: `java.util.Random`'s byte stream, and the
 * ZooKeeper session password derived from a session id (F8's KillSession needs it, since the
 * holder's password lives only in the holder's process).
 */
import { describe, expect, it } from 'vitest';
import { javaRandomBytes, zkSessionPassword } from '../../tools/torture/src/fault-tools.js';

describe('javaRandomBytes', () => {
  it('matches java.util.Random: the first nextInt() of seeds 0 and 42, low byte first', () => {
    // new Random(0).nextInt() == -1155484576 (0xBB20B460); new Random(42).nextInt() == -1170105035.
    expect(javaRandomBytes(0n, 4)).toEqual(Buffer.from([0x60, 0xb4, 0x20, 0xbb]));
    expect(javaRandomBytes(42n, 4).readInt32LE(0)).toBe(-1170105035);
  });

  it('cuts the last nextInt() short when the count is not a multiple of 4', () => {
    const full = javaRandomBytes(7n, 8);
    expect(javaRandomBytes(7n, 6)).toEqual(full.subarray(0, 6));
  });
});

describe('zkSessionPassword', () => {
  it("is the server's password of a session, as the C client prints it", () => {
    // Read from a live ZooKeeper 3.8 session (client_id, client_password of the C client).
    expect(zkSessionPassword('100010cecf20051')).toBe('64CE33E637688CBAEAA9490B8C77F62E');
  });

  it('takes ids with the top bit set (negative as a Java long)', () => {
    expect(zkSessionPassword('ff00000000000001')).toMatch(/^[0-9A-F]{32}$/);
  });
});
