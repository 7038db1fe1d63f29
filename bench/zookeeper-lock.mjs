// fencelock's ZooKeeper backend next to Curator's InterProcessMutex and the raw recipe (create an
// ephemeral sequential node, list the children, delete it): the ZooKeeper part of the bench
// suite. Arguments go on to bench/run.mjs, e.g. `node bench/zookeeper-lock.mjs --quick`.
import { main } from './run.mjs';

process.exit(await main(['--only', 'zookeeper', ...process.argv.slice(2)]));
