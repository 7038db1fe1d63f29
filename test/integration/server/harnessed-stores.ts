/**
 * The stores most sidecar tests run on, each with a harness that reads the engine behind the
 * sidecar's back (`../handed/stores.ts`): the shared Redis and a fresh SQLite file.
 */
import { REDIS_URL } from '../../helpers/engines.js';
import { redisHarness, sqliteHarness } from '../handed/stores.js';

export const HARNESSED_STORES = [
  { name: 'redis', make: () => ({ harness: redisHarness(), url: () => REDIS_URL }) },
  {
    name: 'sqlite',
    make: () => {
      const harness = sqliteHarness();
      return { harness, url: () => `sqlite:${harness.db.name}` };
    },
  },
] as const;
