#!/usr/bin/env node
// The charts of the docs site, from the newest committed results: bench/results/<date> and
// docs/torture/<date>. A result's committed <date>.svg is its chart as its run drew it (from the
// unrounded measurements, so it matches the <date>.md tables figure for figure) and is used as
// is; a result committed without one is drawn from its JSON by the renderer that draws it after a
// run (bench/lib/report.mjs; tools/torture/src/report.ts, loaded from source through Vite so the
// docs need no `npm run build`). They land in docs/public/charts/ (git-ignored), served at
// /charts/bench.svg and /charts/torture.svg.
// Usage: node scripts/docs/charts.mjs
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { runnerImport } from 'vite';
import { buildReport } from '../../bench/lib/report.mjs';

const root = resolve(import.meta.dirname, '../..');
const outDir = join(root, 'docs/public/charts');

/** The path without extension of the newest `<YYYY-MM-DD>.json` in `dir` (ISO dates sort as strings). */
function newestResult(dir) {
  const dated = readdirSync(dir)
    .filter((name) => /^\d{4}-\d{2}-\d{2}\.json$/.test(name))
    .sort();
  if (dated.length === 0) throw new Error(`charts: no <date>.json result in ${dir}`);
  return join(dir, dated.at(-1).slice(0, -'.json'.length));
}

const drawBench = async (result) => buildReport({ ...result, results: result.runs }).svg;

const drawTorture = async (result) => {
  const { module } = await runnerImport(join(root, 'tools/torture/src/report.ts'), {
    configFile: false,
    logLevel: 'silent',
  });
  return module.svgChart(result);
};

const charts = [
  { name: 'bench.svg', dir: 'bench/results', draw: drawBench },
  { name: 'torture.svg', dir: 'docs/torture', draw: drawTorture },
];

mkdirSync(outDir, { recursive: true });
for (const { name, dir, draw } of charts) {
  const stem = newestResult(join(root, dir));
  const target = join(outDir, name);
  if (existsSync(`${stem}.svg`)) {
    copyFileSync(`${stem}.svg`, target);
    console.log(`charts: ${relative(root, target)} is ${relative(root, stem)}.svg`);
  } else {
    writeFileSync(target, await draw(JSON.parse(readFileSync(`${stem}.json`, 'utf8'))));
    console.log(`charts: ${relative(root, target)} drawn from ${relative(root, stem)}.json`);
  }
}
