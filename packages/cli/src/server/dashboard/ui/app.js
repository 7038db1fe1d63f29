// The dashboard page (served at /ui by routes/dashboard.ts). It signs in when the sidecar has a
// token, follows the Server-Sent Events of /ui/events (locks, history, health) and of
// /ui/api/elections/observe (one stream per followed election), and draws the view the URL's hash
// names: #/locks, #/lock/<key>, #/elections, #/health. Every key and owner is put in
// the page as text (textContent), never as HTML. Charts: uPlot (window.uPlot, /ui/vendor/).

const $ = (id) => document.getElementById(id);

const VIEWS = ['sign-in-view', 'locks-view', 'lock-view', 'elections-view', 'health-view'];

/** Where this browser keeps the names of the followed elections. */
const ELECTIONS_STORAGE = 'fencelock.dashboard.elections';

const CHARTS = [
  { id: 'grants', title: 'Grants per second', fields: [['grantsPerSecond', '']] },
  {
    id: 'wait',
    title: 'Wait time, ms',
    fields: [
      ['waitP50Ms', 'p50 '],
      ['waitP99Ms', 'p99 '],
    ],
  },
  { id: 'hold', title: 'Hold time p99, ms', fields: [['holdP99Ms', '']] },
  { id: 'renew', title: 'Renew failures per 5 s', fields: [['renewFailures', '']] },
  { id: 'lost', title: 'Leases lost per 5 s', fields: [['leasesLost', '']] },
];

/** Line colours with at least 4.5:1 contrast on white. */
const COLOURS = ['#0b57d0', '#b3261e', '#146c2e', '#7d5260', '#8a4b00', '#4a4458'];

const state = {
  prefix: new URLSearchParams(location.search).get('prefix') ?? '',
  source: null,
  snapshot: null,
  health: [],
  /** History of the lock on view: its key and entries, oldest first. */
  detail: { key: null, entries: [] },
  charts: new Map(),
  /** Followed elections by name: their stream, leader (or null), when it changed, last error. */
  elections: new Map(),
};

function route() {
  const hash = location.hash;
  if (hash.startsWith('#/lock/')) {
    try {
      return { view: 'lock', key: decodeURIComponent(hash.slice('#/lock/'.length)) };
    } catch {
      return { view: 'locks' }; // not a key this page made (malformed percent-encoding)
    }
  }
  if (hash === '#/health') return { view: 'health' };
  if (hash === '#/elections') return { view: 'elections' };
  return { view: 'locks' };
}

function show(id) {
  for (const view of VIEWS) $(view).hidden = view !== id;
}

function status(text) {
  $('status').textContent = text;
}

function formatMs(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

function cell(row, text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  row.append(td);
  return td;
}

function lockLink(key) {
  const a = document.createElement('a');
  a.href = `#/lock/${encodeURIComponent(key)}`;
  a.textContent = key;
  return a;
}

function renderLocks() {
  const snapshot = state.snapshot;
  const body = $('locks-table').tBodies[0];
  body.replaceChildren();
  $('locks-caption').textContent = `Held locks under “${state.prefix}”`;
  if (snapshot === null) return;
  const needle = $('search').value.trim().toLowerCase();
  let shown = 0;
  for (const lock of snapshot.locks) {
    const owners = lock.holders.map((h) => h.owner).join(' ');
    if (needle && !`${lock.key} ${owners}`.toLowerCase().includes(needle)) continue;
    shown++;
    const holders = lock.holders.length > 0 ? lock.holders : [null];
    holders.forEach((holder, i) => {
      const row = document.createElement('tr');
      row.dataset.key = lock.key;
      const keyCell = cell(row, '', 'key');
      if (i === 0) keyCell.append(lockLink(lock.key));
      cell(row, lock.mode === 'permits' ? `permits (${lock.permits})` : lock.mode);
      cell(row, holder?.owner ?? '–');
      cell(row, holder?.fencingToken ?? '–');
      cell(row, holder ? formatMs(holder.ttlMs) : '–');
      cell(row, holder ? formatMs(holder.heldForMs) : '–');
      cell(row, i === 0 ? String(lock.waiters) : '');
      body.append(row);
    });
  }
  const parts = [`${shown} of ${snapshot.locks.length} held keys shown`];
  if (snapshot.truncated) parts.push('the listing stops at its first 500 keys');
  if (snapshot.error) parts.push(`the last listing failed: ${snapshot.error}`);
  parts.push(`listed at ${new Date(snapshot.at).toLocaleTimeString()}`);
  $('locks-note').textContent = `${parts.join('; ')}.`;
}

function renderLock(key) {
  $('lock-key').textContent = key;
  const lock = state.snapshot?.locks.find((l) => l.key === key);
  const outside = !key.startsWith(state.prefix);
  $('lock-outside').hidden = !outside;
  let mode = 'not held';
  if (lock) mode = lock.mode === 'permits' ? `permits (${lock.permits})` : lock.mode;
  else if (outside) mode = 'unknown: the key is outside the watched prefix';
  else if (state.snapshot?.truncated) mode = 'not in the listing (it stops at 500 keys)';
  $('lock-mode').textContent = mode;
  $('lock-waiters').textContent = lock ? String(lock.waiters) : '0';
  const holders = $('holders-table').tBodies[0];
  holders.replaceChildren();
  for (const holder of lock?.holders ?? []) {
    const row = document.createElement('tr');
    cell(row, holder.owner);
    cell(row, holder.fencingToken);
    cell(row, formatMs(holder.ttlMs));
    cell(row, formatMs(holder.heldForMs));
    holders.append(row);
  }
  const history = $('history-table').tBodies[0];
  history.replaceChildren();
  const entries = state.detail.key === key ? state.detail.entries : [];
  for (const entry of [...entries].reverse()) {
    const row = document.createElement('tr');
    cell(row, new Date(entry.at).toLocaleTimeString());
    cell(row, entry.reason ? `${entry.event} (${entry.reason})` : entry.event);
    cell(row, entry.owner);
    cell(row, entry.fencingToken);
    history.append(row);
  }
}

function addHistory(key, entry) {
  if (state.detail.key !== key) return;
  if (entry.event === 'released' || entry.event === 'lost') {
    // It takes the place of an `ended` the listing told of the same grant (the server did too).
    state.detail.entries = state.detail.entries.filter(
      (e) =>
        !(e.event === 'ended' && e.owner === entry.owner && e.fencingToken === entry.fencingToken),
    );
  }
  const same = (e) =>
    e.at === entry.at &&
    e.event === entry.event &&
    e.owner === entry.owner &&
    e.fencingToken === entry.fencingToken;
  if (!state.detail.entries.some(same)) state.detail.entries.push(entry);
}

async function openLock(key) {
  if (state.detail.key === key) return;
  state.detail = { key, entries: [] };
  const answer = await fetch(`/ui/api/history?key=${encodeURIComponent(key)}`);
  if (!answer.ok || state.detail.key !== key) return;
  const { entries } = await answer.json();
  const later = state.detail.entries;
  state.detail.entries = entries;
  for (const entry of later) addHistory(key, entry);
  if (route().view === 'lock') renderLock(key);
}

function chartOf(spec, series) {
  let chart = state.charts.get(spec.id);
  const labels = series.flatMap((s) => spec.fields.map(([, p]) => `${p}${s.store}`));
  if (chart && chart.labels.join('\n') === labels.join('\n')) return chart;
  chart?.plot.destroy();
  let figure = document.getElementById(`chart-${spec.id}`);
  if (!figure) {
    figure = document.createElement('figure');
    figure.id = `chart-${spec.id}`;
    figure.dataset.metric = spec.id;
    const caption = document.createElement('figcaption');
    caption.textContent = spec.title;
    const summary = document.createElement('p');
    summary.className = 'muted summary';
    const plotArea = document.createElement('div');
    plotArea.setAttribute('role', 'img');
    plotArea.setAttribute('aria-label', `${spec.title}, chart`);
    figure.append(caption, summary, plotArea);
    $('charts').append(figure);
  }
  const plotArea = figure.querySelector('[role="img"]');
  plotArea.replaceChildren();
  const plot = new window.uPlot(
    {
      width: Math.max(320, Math.min(900, $('charts').clientWidth || 900)),
      height: 180,
      series: [
        {},
        ...labels.map((label, i) => ({
          label,
          stroke: COLOURS[i % COLOURS.length],
          width: 2,
          spanGaps: false,
        })),
      ],
      axes: [{}, { size: 60 }],
    },
    [[], ...labels.map(() => [])],
    plotArea,
  );
  chart = { plot, labels, figure };
  state.charts.set(spec.id, chart);
  return chart;
}

function renderHealth() {
  const series = state.health;
  if (series.length === 0) {
    $('charts').textContent = 'No lock traffic through this sidecar yet.';
    return;
  }
  if ($('charts').firstChild?.nodeType === Node.TEXT_NODE) $('charts').replaceChildren();
  for (const spec of CHARTS) {
    const chart = chartOf(spec, series);
    const xs = series[0].points.map((p) => p.at / 1000);
    const ys = series.flatMap((s) => spec.fields.map(([field]) => s.points.map((p) => p[field])));
    chart.plot.setData([xs, ...ys]);
    const values = ys.flat().filter((v) => v !== null);
    const total = values.reduce((a, b) => a + b, 0);
    const peak = values.length ? Math.max(...values) : 0;
    const last = ys.map((column) => column.at(-1)).filter((v) => v !== null);
    chart.figure.dataset.total = String(total);
    chart.figure.querySelector('.summary').textContent =
      `Latest ${last.length ? last.map((v) => Math.round(v * 100) / 100).join(' / ') : '–'}; peak ${Math.round(peak * 100) / 100} over 15 minutes.`;
  }
}

function savedElections() {
  try {
    const names = JSON.parse(localStorage.getItem(ELECTIONS_STORAGE) ?? '[]');
    return Array.isArray(names) ? names.filter((n) => typeof n === 'string') : [];
  } catch {
    return [];
  }
}

function saveElections() {
  localStorage.setItem(ELECTIONS_STORAGE, JSON.stringify([...state.elections.keys()]));
}

function followElection(name) {
  if (state.elections.has(name)) return;
  const election = { source: null, leader: null, since: null, error: null };
  state.elections.set(name, election);
  const source = new EventSource(`/ui/api/elections/observe?name=${encodeURIComponent(name)}`);
  election.source = source;
  source.addEventListener('message', (event) => {
    const { leader } = JSON.parse(event.data);
    if (leader?.term !== election.leader?.term) election.since = Date.now();
    election.leader = leader;
    election.error = null;
    if (route().view === 'elections') renderElections();
  });
  source.addEventListener('error', (event) => {
    // The server's own `event: error` carries its answer; a lost connection carries nothing.
    election.error = event.data ? JSON.parse(event.data).message : 'no answer; trying again';
    if (source.readyState === EventSource.CLOSED)
      election.error = 'the sidecar refused to follow it';
    if (route().view === 'elections') renderElections();
  });
}

function unfollowElection(name) {
  state.elections.get(name)?.source?.close();
  state.elections.delete(name);
  saveElections();
  renderElections();
}

function renderElections() {
  const body = $('elections-table').tBodies[0];
  body.replaceChildren();
  for (const [name, election] of state.elections) {
    const row = document.createElement('tr');
    row.dataset.election = name;
    const leader = election.leader;
    cell(row, name, 'key');
    cell(row, election.error ?? leader?.ownerId ?? 'nobody');
    cell(row, leader?.term ?? '–');
    cell(row, leader?.value ?? '–');
    cell(row, leader ? formatMs(leader.ttlMs) : '–');
    cell(row, leader && election.since ? new Date(election.since).toLocaleTimeString() : '–');
    const stop = document.createElement('button');
    stop.type = 'button';
    stop.textContent = 'Stop';
    stop.setAttribute('aria-label', `Stop following ${name}`);
    stop.addEventListener('click', () => unfollowElection(name));
    cell(row, '').append(stop);
    body.append(row);
  }
}

function render() {
  const { view, key } = route();
  for (const a of document.querySelectorAll('#views a')) {
    const current = a.getAttribute('href') === (view === 'lock' ? '#/locks' : `#/${view}`);
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (view === 'lock') {
    show('lock-view');
    void openLock(key);
    renderLock(key);
  } else if (view === 'health') {
    show('health-view');
    renderHealth();
  } else if (view === 'elections') {
    show('elections-view');
    renderElections();
  } else {
    show('locks-view');
    renderLocks();
  }
}

function connect() {
  state.source?.close();
  $('views').hidden = false;
  const source = new EventSource(`/ui/events?prefix=${encodeURIComponent(state.prefix)}`);
  state.source = source;
  source.addEventListener('hello', (event) => {
    const hello = JSON.parse(event.data);
    $('store').textContent = `Store ${hello.store} · fencelock ${hello.version}`;
  });
  source.addEventListener('locks', (event) => {
    state.snapshot = JSON.parse(event.data);
    const { view, key } = route();
    if (view === 'locks') renderLocks();
    if (view === 'lock') renderLock(key);
  });
  source.addEventListener('history', (event) => {
    const { key, entry } = JSON.parse(event.data);
    addHistory(key, entry);
    const current = route();
    if (current.view === 'lock' && current.key === key) renderLock(key);
  });
  source.addEventListener('health', (event) => {
    state.health = JSON.parse(event.data);
    if (route().view === 'health') renderHealth();
  });
  for (const name of savedElections()) followElection(name);
  source.addEventListener('open', () => status('Live'));
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) void streamRefused(source.url);
    else status('Connection lost; trying again…');
  });
  render();
}

/** Pause before the page asks for a refused or lost stream again, ms. */
const RETRY_MS = 2_000;

/**
 * The server ended or refused the stream of `url` for good: find out why and say it. Signed out
 * → the sign-in form; a 4xx answer (a bad prefix, too many streams) → its message, no retry until
 * the user acts; anything else → one more try after RETRY_MS.
 */
async function streamRefused(url) {
  try {
    const { signedIn } = await (await fetch('/ui/session')).json();
    if (!signedIn) {
      await start();
      return;
    }
    const controller = new AbortController();
    const answer = await fetch(url, { signal: controller.signal });
    if (answer.status >= 400 && answer.status < 500) {
      const body = await answer.json().catch(() => ({}));
      status(`The sidecar refused this view: ${body.message ?? answer.status}.`);
      return;
    }
    controller.abort();
  } catch {
    // The sidecar did not answer: try again below.
  }
  status('The sidecar does not answer; trying again…');
  setTimeout(() => {
    if (state.source?.url === url && state.source.readyState === EventSource.CLOSED) connect();
  }, RETRY_MS);
}

async function start() {
  const answer = await fetch('/ui/session');
  const { tokenRequired, signedIn } = await answer.json();
  $('sign-out').hidden = !tokenRequired;
  if (signedIn) {
    connect();
    return;
  }
  state.source?.close();
  for (const election of state.elections.values()) election.source?.close();
  state.elections.clear();
  $('views').hidden = true;
  $('sign-out').hidden = true;
  status('');
  show('sign-in-view');
  $('token').focus();
}

$('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const answer = await fetch('/ui/session', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token: $('token').value }),
  });
  if (answer.status === 204) {
    $('token').value = '';
    $('sign-in-error').textContent = '';
    await start();
  } else {
    $('sign-in-error').textContent = 'The sidecar refused that token.';
  }
});

$('sign-out').addEventListener('click', async () => {
  await fetch('/ui/session', { method: 'DELETE' });
  await start();
});

$('prefix-form').addEventListener('submit', (event) => {
  event.preventDefault();
  watchPrefix($('prefix').value);
});

function watchPrefix(prefix) {
  state.prefix = prefix;
  $('prefix').value = prefix;
  const url = new URL(location.href);
  if (state.prefix === '') url.searchParams.delete('prefix');
  else url.searchParams.set('prefix', state.prefix);
  history.replaceState(null, '', url);
  state.snapshot = null;
  connect();
}

$('election-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const name = $('election-name').value;
  if (name === '') return;
  followElection(name);
  saveElections();
  $('election-name').value = '';
  renderElections();
});

$('watch-key').addEventListener('click', () => {
  const { key } = route();
  if (key !== undefined) watchPrefix(key);
});

$('search').addEventListener('input', renderLocks);
window.addEventListener('hashchange', render);
$('prefix').value = state.prefix;
void start();
