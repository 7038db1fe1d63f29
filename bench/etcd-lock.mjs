// fencelock's etcd backend next to the etcd3 package's Lock and the raw etcd ceiling: the etcd
// part of the bench suite (`npm run bench:etcd`). Arguments go on to bench/run.mjs, e.g.
// `node bench/etcd-lock.mjs --quick` or `--workload uncontended`.
import { main } from './run.mjs';

process.exit(await main(['--only', 'etcd', ...process.argv.slice(2)]));
