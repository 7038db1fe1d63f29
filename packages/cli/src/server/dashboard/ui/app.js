// The dashboard page (served at /ui by routes/dashboard.ts). It signs in when the sidecar has a
// token, follows the Server-Sent Events of /ui/events (locks, history, health) and of
// /ui/api/elections/observe (one stream per followed election), and draws the view the URL's hash
// names: #/locks, #/lock/<key>, #/elections, #/health. Every key and owner is put in
// the page as text (textContent), never as HTML. The views are modules of their own
// (locks-view.js, elections-view.js, health-view.js) over state.js and dom.js.

import { $, status } from './dom.js';
import {
  followElection,
  renderElections,
  savedElections,
  saveElections,
} from './elections-view.js';
import { renderHealth } from './health-view.js';
import { addHistory, openLock, renderLock, renderLocks } from './locks-view.js';
import { route, state } from './state.js';

const VIEWS = ['sign-in-view', 'locks-view', 'lock-view', 'elections-view', 'health-view'];

function show(id) {
  for (const view of VIEWS) $(view).hidden = view !== id;
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
      // What was listed before is not this prefix's.
      state.snapshot = null;
      render();
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
  $('store').textContent = '';
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
