/**
 * The torture harness's fenced register (tools/torture/src/register.ts) on the register server of
 * `scripts/services.sh up register`: its log must list the writes in the order it applied them,
 * since the checker replays the log to count stale writes. Many writers race for the resource row
 * here; replaying the log by its order must give back every accept/refuse decision and the final
 * value.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { FencedRegister, type WriteRecord } from '../../../tools/torture/src/register.js';
import { REGISTER_URL } from '../../helpers/engines.js';

/** The register's rule replayed in log order: the decisions it should have made. */
function replay(writes: readonly WriteRecord[], permits: number): boolean[] {
  const top: bigint[] = [];
  return writes.map((write) => {
    const accepted = top.filter((token) => token > write.token).length < permits;
    if (accepted && !top.includes(write.token)) {
      top.push(write.token);
      top.sort((a, b) => (a > b ? -1 : a < b ? 1 : 0));
      top.length = Math.min(top.length, permits);
    }
    return accepted;
  });
}

const opened: FencedRegister[][] = [];

afterAll(async () => {
  for (const registers of opened) {
    await registers[0]!.drop();
    await Promise.all(registers.map((r) => r.close()));
  }
});

describe('the torture register', () => {
  for (const permits of [1, 3]) {
    it(`logs writes in the order it applied them (permits ${permits}, 24 racing connections)`, async () => {
      const schema = `register_order_${randomBytes(4).toString('hex')}`;
      // Each register object has a pool of 2 connections: 12 objects race on one row.
      const registers = Array.from(
        { length: 12 },
        () => new FencedRegister(REGISTER_URL, schema, permits),
      );
      opened.push(registers);
      await registers[0]!.create();
      let nextToken = 0n;
      const writesPerWriter = 60;
      await Promise.all(
        registers.flatMap((register, r) =>
          [0, 1].map(async (c) => {
            for (let i = 0; i < writesPerWriter; i++) {
              // Tokens mostly rising, some stale: both decisions happen.
              nextToken += 1n;
              const token = Math.random() < 0.3 ? nextToken - 5n : nextToken;
              await register.write(token, `w${r}.${c}`, true);
            }
          }),
        ),
      );
      const { writes, value } = await registers[0]!.read();
      expect(writes).toHaveLength(24 * writesPerWriter);
      expect(writes.map((w) => w.seq)).toEqual(writes.map((_, i) => i + 1));
      const decided = writes.map((w) => w.accepted);
      expect(replay(writes, permits)).toEqual(decided);
      expect(value).toBe(BigInt(decided.filter(Boolean).length));
      expect(decided).toContain(false);
    }, 120_000);
  }
});
