// The Health view: uPlot charts (window.uPlot, /ui/vendor/) of the health series, one figure per
// metric with a text summary for readers who cannot see the chart.
import { $ } from './dom.js';
import { state } from './state.js';

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
      width: Math.max(320, Math.min(1200, $('charts').clientWidth || 900)),
      height: 180,
      series: [
        {},
        ...labels.map((label, i) => ({
          label,
          stroke: COLOURS[i % COLOURS.length],
          width: 2,
          spanGaps: false,
          // A value of a single bucket between empty ones is a point, not an invisible line.
          points: { size: 6 },
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

export function renderHealth() {
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
