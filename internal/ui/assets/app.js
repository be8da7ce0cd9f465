// Runnel's dashboard: a single page that reads the REST API of its own origin once a second and draws it.
// No framework and no build step: the page is rebuilt from the API's documents on every poll, so what it
// shows is always those documents, formatted (docs/ui.md). Elements carry stable ids and data-attributes
// (data-vertex, data-failover-index, data-tm-state, data-value) for the browser tests.
'use strict';

(function () {
  const POLL_MS = 1000;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // What the page keeps between polls: the route and what the user picked on it.
  const state = {
    seq: 0, // bumped on every route change: a poll of an older route drops its answer
    timer: 0,
    route: null,
    vertex: null, // the vertex whose subtasks are open
    failover: null, // the failover (index in the API's list) picked on the timeline
    hover: null, // the failover under the pointer
    last: null, // the latest documents of the route, to redraw on a click without waiting for the poll
  };

  // ---- DOM helpers --------------------------------------------------------------------------------

  function build(el, attrs, kids) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === undefined || kid === null || kid === false) continue;
      el.appendChild(typeof kid === 'string' || typeof kid === 'number' ? document.createTextNode(String(kid)) : kid);
    }
    return el;
  }
  const h = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
  const s = (tag, attrs, ...kids) => build(document.createElementNS(SVG_NS, tag), attrs, kids);

  // ---- formatting: every number shown is the API's, formatted; data-value keeps it raw --------------

  const DASH = '–';
  const present = (v) => v !== undefined && v !== null;

  function fmtInt(n) {
    return present(n) ? Number(n).toLocaleString('en-US') : DASH;
  }
  function fmtRate(x) {
    if (!present(x)) return DASH;
    if (x >= 1e6) return (x / 1e6).toFixed(2) + 'M/s';
    if (x >= 1e4) return (x / 1e3).toFixed(1) + 'k/s';
    if (x >= 1e3) return (x / 1e3).toFixed(2) + 'k/s';
    return x.toFixed(0) + '/s';
  }
  function fmtMs(ms) {
    if (!present(ms)) return DASH;
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(2) + ' s';
    const m = Math.floor(ms / 60000);
    return m + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
  }
  // busy, backpressured and idle time come in ms per second: a tenth of it is the percentage.
  function fmtPct(msPerS) {
    return present(msPerS) ? Math.round(msPerS / 10) + '%' : DASH;
  }
  function fmtBytes(b) {
    if (!present(b)) return DASH;
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = b;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? v : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[i];
  }
  const pad = (n, w) => String(n).padStart(w || 2, '0');
  function fmtClock(t) {
    if (!present(t)) return DASH;
    const d = new Date(t);
    if (isNaN(d) || d.getFullYear() < 2) return DASH;
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3);
  }
  function fmtDateTime(t) {
    if (!present(t)) return DASH;
    const d = new Date(t);
    if (isNaN(d) || d.getFullYear() < 2) return DASH;
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }
  // A watermark is epoch milliseconds; the largest int64 is "input ended".
  function fmtWatermark(w) {
    if (!present(w)) return DASH;
    if (w >= 9.2e18) return 'end';
    if (w > 0 && w < 1e14) return fmtDateTime(w) + '.' + pad(new Date(w).getMilliseconds(), 3);
    return String(w);
  }
  // In a vertex's box the watermark's time of day is enough; the subtasks table has the date.
  function fmtWatermarkShort(w) {
    if (!present(w) || w >= 9.2e18 || !(w > 0 && w < 1e14)) return fmtWatermark(w);
    return fmtClock(w);
  }
  const num = (text, value, field) => h('span', { class: 'num', 'data-value': present(value) ? value : '', 'data-field': field, text });

  // "check[1]" -> ["check", 1]
  function splitSubtask(id) {
    const i = id.lastIndexOf('[');
    if (i < 0 || !id.endsWith(']')) return [id, -1];
    return [id.slice(0, i), Number(id.slice(i + 1, -1))];
  }

  // ---- the API -------------------------------------------------------------------------------------

  async function api(path) {
    const resp = await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store' });
    let body;
    try {
      body = await resp.json();
    } catch (e) {
      throw new Error(path + ': ' + resp.status + ' ' + resp.statusText);
    }
    if (!resp.ok) throw new Error(body && body.error ? body.error : path + ': ' + resp.status);
    return body;
  }
  // optional reads a document the page can do without (an older server may not serve it).
  const optional = (p) => p.catch(() => null);

  function parseRoute() {
    const hash = location.hash.replace(/^#/, '') || '/';
    let m = hash.match(/^\/jobs\/([^/]+)\/?$/);
    if (m) return { page: 'job', id: decodeURIComponent(m[1]) };
    if (/^\/taskmanagers\/?$/.test(hash)) return { page: 'taskmanagers' };
    return { page: 'overview' };
  }

  async function load(route) {
    switch (route.page) {
      case 'job': {
        const base = '/v1/jobs/' + encodeURIComponent(route.id);
        const [job, jobs, throughput, failovers, checkpoints, exceptions] = await Promise.all([
          api(base), optional(api('/v1/jobs')), optional(api(base + '/throughput')), optional(api(base + '/failovers')),
          optional(api(base + '/checkpoints')), optional(api(base + '/exceptions'))]);
        const summary = jobs && (jobs.jobs || []).find((j) => j.id === route.id);
        return { job, summary, throughput, failovers, checkpoints, exceptions };
      }
      case 'taskmanagers':
        return { tms: await api('/v1/taskmanagers') };
      default: {
        const [jobs, tms] = await Promise.all([api('/v1/jobs'), optional(api('/v1/taskmanagers'))]);
        return { jobs, tms };
      }
    }
  }

  // ---- polling -------------------------------------------------------------------------------------

  async function poll() {
    // A tab nobody looks at asks the API nothing; it catches up when shown again (visibilitychange).
    if (document.hidden) return;
    const seq = state.seq;
    const route = state.route;
    const status = document.getElementById('status');
    try {
      const data = await load(route);
      if (seq !== state.seq) return;
      state.last = data;
      render();
      status.textContent = 'live · ' + fmtClock(Date.now()).slice(0, 8);
      status.setAttribute('data-status', 'ok');
    } catch (e) {
      if (seq !== state.seq) return;
      status.textContent = 'not updated: ' + e.message;
      status.setAttribute('data-status', 'error');
      if (!state.last) {
        const app = document.getElementById('app');
        app.replaceChildren(h('p', { class: 'error', id: 'load-error', text: e.message }));
      }
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  function navigate() {
    clearTimeout(state.timer);
    state.seq++;
    state.route = parseRoute();
    state.vertex = null;
    state.failover = null;
    state.hover = null;
    state.last = null;
    document.getElementById('app').replaceChildren(h('p', { class: 'muted', text: 'loading…' }));
    for (const a of document.querySelectorAll('header nav a')) {
      a.classList.toggle('active', a.id === 'nav-' + (state.route.page === 'taskmanagers' ? 'taskmanagers' : 'jobs'));
    }
    poll();
  }

  function render() {
    const app = document.getElementById('app');
    const d = state.last;
    if (!d) return;
    const y = window.scrollY;
    let view;
    switch (state.route.page) {
      case 'job':
        view = jobPage(d);
        break;
      case 'taskmanagers':
        view = h('div', { id: 'page-taskmanagers' }, card('taskmanagers', 'TaskManagers', tmTable(d.tms)));
        break;
      default:
        view = overviewPage(d);
    }
    // The redraw replaces every element: a keyboard user's focus goes to the new vertex or failover that
    // stands for the one focused.
    const focused = document.activeElement;
    let refocus = null;
    if (focused && focused.hasAttribute && focused.hasAttribute('data-failover-index')) {
      refocus = '#failover-list [data-failover-index="' + focused.getAttribute('data-failover-index') + '"]';
    } else if (focused && focused.closest && focused.closest('#graph-svg') && focused.hasAttribute('data-vertex')) {
      refocus = '#graph-svg [data-vertex="' + CSS.escape(focused.getAttribute('data-vertex')) + '"]';
    }
    app.replaceChildren(view);
    if (refocus) {
      const el = app.querySelector(refocus);
      if (el) el.focus({ preventScroll: true });
    }
    window.scrollTo(0, y);
  }

  function card(id, title, ...body) {
    return h('section', { class: 'card', id }, h('h2', {}, title), body);
  }

  // ---- overview: jobs and TaskManagers -------------------------------------------------------------

  function overviewPage(d) {
    const jobs = (d.jobs && d.jobs.jobs) || [];
    const rows = jobs.map((j) => {
      const ended = j.ended && new Date(j.ended).getFullYear() > 1;
      const durMs = (ended ? new Date(j.ended) : new Date()) - new Date(j.started);
      return h('tr', { 'data-job': j.id, 'data-job-status': j.status },
        h('td', {}, h('a', { href: '#/jobs/' + encodeURIComponent(j.id), class: 'job-link', text: j.name || j.id })),
        h('td', {}, badge(j.status)),
        h('td', { text: fmtDateTime(j.started) }),
        h('td', { class: 'r' }, num(fmtMs(Math.max(0, Math.round(durMs))), durMs)),
        h('td', { class: 'r' }, num(fmtInt(j.parallelism), j.parallelism, 'parallelism')),
        h('td', { text: j.failover || DASH }),
        h('td', { class: 'mono muted', text: j.id }));
    });
    const table = jobs.length
      ? h('table', { id: 'jobs-table' },
        h('thead', {}, h('tr', {}, ['Job', 'Status', 'Started', 'Duration', 'Parallelism', 'Failover', 'Id'].map((t, i) =>
          h('th', { class: i === 3 || i === 4 ? 'r' : null, text: t })))),
        h('tbody', {}, rows))
      : h('p', { class: 'muted', text: 'No jobs yet.' });
    return h('div', { id: 'page-overview' },
      card('jobs', 'Jobs', table),
      card('taskmanagers', 'TaskManagers', tmTable(d.tms)));
  }

  function badge(status) {
    return h('span', { class: 'badge s-' + String(status || 'unknown').toLowerCase(), text: status || DASH });
  }

  function tmTable(doc) {
    if (!doc) return h('p', { class: 'muted', text: 'TaskManagers not available.' });
    const tms = doc.taskmanagers || [];
    if (!tms.length) return h('p', { class: 'muted', text: 'No TaskManager registered.' });
    const rows = tms.map((tm) => {
      const departed = tm.state === 'LOST' || tm.state === 'LEFT';
      const at = tm.departed_at;
      const why = tm.reason;
      return h('tr', { 'data-tm': tm.name, 'data-tm-state': tm.state || '', class: departed ? 'departed ' + tm.state.toLowerCase() : null },
        h('td', { class: 'strong', text: tm.name }),
        h('td', {}, present(tm.state) ? badge(tm.state) : DASH),
        // A departed TaskManager's slots are out of the pool: neither used nor free.
        h('td', { class: 'r' }, departed ? DASH : num(fmtInt(tm.slots - tm.free_slots), tm.slots - tm.free_slots, 'slots_used')),
        h('td', { class: 'r' }, departed ? DASH : num(fmtInt(tm.free_slots), tm.free_slots, 'free_slots')),
        h('td', { class: 'r' }, num(fmtInt(tm.slots), tm.slots, 'slots')),
        h('td', { class: 'r' }, num(fmtInt(tm.tasks), tm.tasks, 'tasks')),
        h('td', { class: 'r' }, num(fmtBytes(tm.memory_bytes), tm.memory_bytes, 'memory_bytes')),
        h('td', { class: 'r' }, num(fmtBytes(tm.heap_bytes), tm.heap_bytes, 'heap_bytes')),
        h('td', { class: 'r' }, num(fmtMs(tm.since_heard_ms), tm.since_heard_ms, 'since_heard_ms')),
        h('td', { class: 'mono', text: tm.data_address || DASH }),
        h('td', { class: 'departed-info' }, departed ? [fmtDateTime(at), why ? ': ' + why : ''] : ''));
    });
    return h('table', { id: 'tm-table' },
      h('thead', {}, h('tr', {}, ['TaskManager', 'State', 'Slots used', 'Free', 'Slots', 'Tasks', 'Memory', 'Heap', 'Last heard', 'Data address', 'Departed'].map((t, i) =>
        h('th', { class: i >= 2 && i <= 8 ? 'r' : null, text: t })))),
      h('tbody', {}, rows));
  }

  // ---- a job ---------------------------------------------------------------------------------------

  function jobPage(d) {
    const job = d.job;
    const fo = d.failovers || { failovers: job.failovers || [], failover_totals: job.failover_totals };
    const failovers = fo.failovers || [];
    const active = state.hover !== null ? state.hover : state.failover;
    const restarted = new Map(); // vertex name -> set of restarted subtask indexes
    if (active !== null && failovers[active]) {
      for (const id of failovers[active].restarted || []) {
        const [name, idx] = splitSubtask(id);
        if (!restarted.has(name)) restarted.set(name, new Set());
        restarted.get(name).add(idx);
      }
    }
    const samples = (d.throughput && d.throughput.samples) || [];
    const lastSample = samples.length ? samples[samples.length - 1] : null;
    const rates = new Map();
    if (lastSample) for (const v of lastSample.vertices || []) rates.set(v.name, v);

    const sum = d.summary || {};
    const cp = (d.checkpoints && d.checkpoints.checkpoints) || job.checkpoints || {};
    const head = h('section', { id: 'job-head', class: 'card head' },
      h('div', { class: 'title' }, h('h1', { id: 'job-name', text: job.job || sum.name || state.route.id }), badge(job.status)),
      h('dl', { class: 'facts' },
        fact('Started', fmtDateTime(sum.started)),
        fact('Duration', num(fmtMs(job.wall_ms), job.wall_ms, 'wall_ms')),
        fact('Parallelism', num(fmtInt(sum.parallelism), sum.parallelism, 'parallelism')),
        fact('Failover', sum.failover || (failovers[0] && failovers[0].strategy) || DASH),
        fact('Failovers', num(fmtInt(fo.failover_totals ? fo.failover_totals.failovers : failovers.length),
          fo.failover_totals ? fo.failover_totals.failovers : failovers.length, 'failovers')),
        fact('Checkpoints', num(fmtInt(cp.completed), cp.completed, 'completed')),
        fact('Id', h('span', { class: 'mono', text: state.route.id }))),
      job.error ? h('p', { class: 'error', id: 'job-error', text: job.error }) : null,
      job.error_stack ? h('pre', { class: 'stack', id: 'job-error-stack', text: job.error_stack }) : null,
      job.waiting ? h('p', { class: 'muted', text: 'Waiting: ' + job.waiting }) : null);

    const graphCard = card('graph', 'Job graph', graph(job.vertices || [], rates, restarted),
      h('p', { class: 'legend' },
        h('span', { class: 'sw idle' }), 'idle ', h('span', { class: 'sw busy' }), 'busy ',
        h('span', { class: 'sw bp' }), 'backpressured ', h('span', { class: 'sw restarted' }), 'restarted by the picked failover',
        h('span', { class: 'muted', text: ' · click a vertex for its subtasks' })));
    const vertex = (job.vertices || []).find((v) => v.name === state.vertex);
    return h('div', { id: 'page-job', 'data-job': state.route.id },
      head,
      h('div', { class: 'row' }, graphCard, failoverCard(fo, new Map((job.vertices || []).map((v) => [v.name, v.parallelism])))),
      vertex ? subtasksCard(vertex, restarted.get(vertex.name)) : null,
      throughputCard(d.throughput, job.vertices || [], failovers),
      checkpointsCard(d.checkpoints, cp),
      exceptionsCard(d.exceptions));
  }

  function fact(k, v) {
    return h('div', {}, h('dt', { text: k }), h('dd', {}, v));
  }

  // ---- the job graph: a layered layout of a small DAG ----------------------------------------------

  const BOX_W = 196;
  const BOX_H = 94;
  const GAP_X = 76;
  const GAP_Y = 22;
  const PAD = 14;

  // layout puts each vertex in the layer of its longest path from a source and orders each layer by the
  // mean position of its inputs, so edges mostly run straight; job graphs are small enough for that.
  function layout(vertices) {
    const index = new Map(vertices.map((v, i) => [v.name, i]));
    const depth = new Map();
    const visiting = new Set();
    const depthOf = (name) => {
      if (depth.has(name)) return depth.get(name);
      if (visiting.has(name)) return 0;
      visiting.add(name);
      let d = 0;
      for (const inp of vertices[index.get(name)].inputs || []) {
        if (index.has(inp.from)) d = Math.max(d, depthOf(inp.from) + 1);
      }
      visiting.delete(name);
      depth.set(name, d);
      return d;
    };
    const layers = [];
    for (const v of vertices) {
      const d = depthOf(v.name);
      (layers[d] = layers[d] || []).push(v);
    }
    const pos = new Map();
    layers.forEach((layer, li) => {
      if (li > 0) {
        const key = (v) => {
          const ps = (v.inputs || []).filter((i) => pos.has(i.from)).map((i) => pos.get(i.from).order);
          return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : 0;
        };
        layer.sort((a, b) => key(a) - key(b) || index.get(a.name) - index.get(b.name));
      }
      layer.forEach((v, order) => pos.set(v.name, { layer: li, order }));
    });
    const tallest = Math.max(1, ...layers.map((l) => (l ? l.length : 0)));
    const height = tallest * BOX_H + (tallest - 1) * GAP_Y + 2 * PAD;
    for (const [li, layer] of layers.entries()) {
      if (!layer) continue;
      const colH = layer.length * BOX_H + (layer.length - 1) * GAP_Y;
      const top = (height - colH) / 2;
      layer.forEach((v, order) => {
        const p = pos.get(v.name);
        p.x = PAD + li * (BOX_W + GAP_X);
        p.y = top + order * (BOX_H + GAP_Y);
      });
    }
    const width = 2 * PAD + layers.length * BOX_W + Math.max(0, layers.length - 1) * GAP_X;
    return { pos, width, height };
  }

  // backpressureLevel follows Flink's thresholds on the share of time backpressured: ok up to 10%, low
  // up to 50%, high above.
  function backpressureLevel(bp) {
    if (!present(bp)) return 'unknown';
    if (bp > 500) return 'high';
    if (bp > 100) return 'low';
    return 'ok';
  }

  // fill colours a vertex as Flink does: red as backpressured as it is, else blue as busy, else grey.
  function fill(busy, bp) {
    if (!present(busy) && !present(bp)) return '#f5f6f8';
    const b = busy || 0;
    const p = bp || 0;
    if (p >= 100 && p >= b) return 'hsl(2, 72%, ' + (94 - 30 * Math.min(1, p / 1000)) + '%)';
    if (b >= 100) return 'hsl(212, 72%, ' + (94 - 30 * Math.min(1, b / 1000)) + '%)';
    return '#e8eaed';
  }

  function clip(text, max) {
    return text.length > max ? text.slice(0, max - 1) + '…' : text;
  }

  function minWatermark(v) {
    let min = null;
    for (const st of v.subtasks || []) {
      if (!present(st.watermark)) return null;
      if (min === null || st.watermark < min) min = st.watermark;
    }
    return min;
  }

  function graph(vertices, rates, restarted) {
    if (!vertices.length) return h('p', { class: 'muted', text: 'No vertices yet.' });
    const { pos, width, height } = layout(vertices);
    const svg = s('svg', { id: 'graph-svg', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': 'job graph' },
      s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }))));
    for (const v of vertices) {
      const to = pos.get(v.name);
      for (const inp of v.inputs || []) {
        const from = pos.get(inp.from);
        if (!from) continue;
        const x1 = from.x + BOX_W;
        const y1 = from.y + BOX_H / 2;
        const x2 = to.x - 2;
        const y2 = to.y + BOX_H / 2;
        const dx = Math.max(30, (x2 - x1) / 2);
        const label = inp.pattern || '';
        const lw = label.length * 6.4 + 10;
        // The label sits on the curve's middle (the Bézier point at u = 1/2): edges that fan out of one
        // vertex or into one part there, a layer's rows apart.
        const u = 0.5;
        const lx = (1 - u) ** 3 * x1 + 3 * (1 - u) ** 2 * u * (x1 + dx) + 3 * (1 - u) * u * u * (x2 - dx) + u ** 3 * x2;
        const ly = (1 - u) ** 3 * y1 + 3 * (1 - u) ** 2 * u * y1 + 3 * (1 - u) * u * u * y2 + u ** 3 * y2;
        svg.appendChild(s('g', { class: 'edge', 'data-edge': inp.from + '->' + v.name, 'data-pattern': label },
          s('path', { d: `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`, 'marker-end': 'url(#arrow)' }),
          s('rect', { x: lx - lw / 2, y: ly - 9, width: lw, height: 17, rx: 8 }),
          s('text', { x: lx, y: ly + 4, 'text-anchor': 'middle', text: label })));
      }
    }
    for (const v of vertices) {
      const p = pos.get(v.name);
      const r = rates.get(v.name);
      const bp = v.backpressured_ms_per_s;
      const busy = v.busy_ms_per_s;
      const re = restarted.get(v.name);
      const wm = minWatermark(v);
      const classes = ['vertex'];
      if (state.vertex === v.name) classes.push('selected');
      if (re) classes.push('restarted');
      const g = s('g', {
        class: classes.join(' '), transform: `translate(${p.x},${p.y})`, 'data-vertex': v.name, 'data-backpressure': backpressureLevel(bp),
        'data-restarted': re ? [...re].sort((a, b) => a - b).join(',') : null, tabindex: 0,
        onclick: () => { state.vertex = state.vertex === v.name ? null : v.name; render(); },
        onkeydown: (e) => { if (e.key === 'Enter') { state.vertex = state.vertex === v.name ? null : v.name; render(); } },
      },
      s('title', { text: v.name + (v.operators && v.operators.length > 1 ? '\noperators: ' + v.operators.join(', ') : '') }),
      s('rect', { class: 'box', width: BOX_W, height: BOX_H, rx: 6, fill: fill(busy, bp) }),
      s('text', { class: 'vname', x: 10, y: 19, text: clip(v.name, 24) }),
      s('text', { class: 'vpar', x: BOX_W - 10, y: 19, 'text-anchor': 'end', text: '×' + v.parallelism }),
      s('text', { class: 'vline', x: 10, y: 40 },
        s('tspan', { text: 'in ' }), s('tspan', { class: 'v', 'data-field': 'records_in_per_s', 'data-value': r ? r.records_in_per_s : '', text: fmtRate(r && r.records_in_per_s) }),
        s('tspan', { text: '  out ' }), s('tspan', { class: 'v', 'data-field': 'records_out_per_s', 'data-value': r ? r.records_out_per_s : '', text: fmtRate(r && r.records_out_per_s) })),
      s('text', { class: 'vline', x: 10, y: 60 },
        s('tspan', { text: 'busy ' }), s('tspan', { class: 'v', 'data-field': 'busy_ms_per_s', 'data-value': present(busy) ? busy : '', text: fmtPct(busy) }),
        s('tspan', { text: '  backpr. ' }), s('tspan', { class: 'v', 'data-field': 'backpressured_ms_per_s', 'data-value': present(bp) ? bp : '', text: fmtPct(bp) })),
      s('text', { class: 'vline', x: 10, y: 80 },
        s('tspan', { text: 'watermark ' }), s('tspan', { class: 'v', 'data-field': 'watermark', 'data-value': present(wm) ? wm : '', text: fmtWatermarkShort(wm) })));
      if (re) {
        const label = 'restarted ' + re.size + '/' + v.parallelism;
        const w = label.length * 6.2 + 12;
        g.appendChild(s('g', { class: 'restart-badge' },
          s('rect', { x: BOX_W - w - 6, y: BOX_H - 9, width: w, height: 17, rx: 8 }),
          s('text', { x: BOX_W - 6 - w / 2, y: BOX_H + 3, 'text-anchor': 'middle', text: label })));
      }
      svg.appendChild(g);
    }
    return h('div', { class: 'graph-wrap' }, svg);
  }

  function subtasksCard(v, restarted) {
    const metricKeys = new Set();
    for (const st of v.subtasks || []) for (const k of Object.keys(st.metrics || {})) metricKeys.add(k);
    const rows = (v.subtasks || []).map((st) => h('tr', {
      'data-subtask': v.name + '[' + st.index + ']', class: restarted && restarted.has(st.index) ? 'restarted' : null,
    },
    h('td', { class: 'r' }, num(String(st.index), st.index, 'index')),
    h('td', { class: 'r' }, num(String(st.attempt), st.attempt, 'attempt')),
    h('td', { text: st.taskmanager || DASH }),
    h('td', {}, badge(st.state)),
    h('td', { class: 'r' }, num(fmtInt(st.records_in), st.records_in, 'records_in')),
    h('td', { class: 'r' }, num(fmtInt(st.records_out), st.records_out, 'records_out')),
    h('td', { class: 'r' }, num(fmtWatermark(st.watermark), st.watermark, 'watermark')),
    h('td', { class: 'r' }, num(fmtPct(st.busy_ms_per_s), st.busy_ms_per_s, 'busy_ms_per_s')),
    h('td', { class: 'r' }, num(fmtPct(st.backpressured_ms_per_s), st.backpressured_ms_per_s, 'backpressured_ms_per_s')),
    h('td', { class: 'r' }, num(fmtPct(st.idle_ms_per_s), st.idle_ms_per_s, 'idle_ms_per_s')),
    h('td', { class: 'r' }, num(fmtBytes(st.inflight_log_bytes), st.inflight_log_bytes, 'inflight_log_bytes')),
    h('td', { class: 'metrics' }, [...metricKeys].sort().map((k) => present((st.metrics || {})[k])
      ? h('span', { class: 'metric' }, k + ' ', num(fmtInt(st.metrics[k]), st.metrics[k], k)) : null))));
    return h('section', { class: 'card', id: 'subtasks', 'data-vertex': v.name },
      h('h2', {}, 'Subtasks of ', h('span', { class: 'mono', text: v.name }),
        h('button', { class: 'close', type: 'button', title: 'close', onclick: () => { state.vertex = null; render(); }, text: '×' })),
      h('p', { class: 'muted small' }, 'operators: ' + (v.operators || []).join(' → ') + ' · records in ', num(fmtInt(v.records_in), v.records_in, 'records_in'),
        ' · out ', num(fmtInt(v.records_out), v.records_out, 'records_out')),
      h('table', { id: 'subtasks-table' },
        h('thead', {}, h('tr', {}, ['#', 'Attempt', 'TaskManager', 'State', 'Records in', 'Records out', 'Watermark', 'Busy', 'Backpressured', 'Idle', 'In-flight log', 'Metrics'].map((t, i) =>
          h('th', { class: [0, 1, 4, 5, 6, 7, 8, 9, 10].includes(i) ? 'r' : null, text: t, title: i === 10 ? 'what the in-flight logs of its outputs hold (task failover replays from them)' : null })))),
        h('tbody', {}, rows)));
  }

  // ---- failovers -----------------------------------------------------------------------------------

  function failoverCard(fo, parallelism) {
    const list = fo.failovers || [];
    const t = fo.failover_totals || {};
    const totals = h('p', { class: 'totals', id: 'failover-totals' },
      'lost ', num(fmtInt(t.records_lost), t.records_lost, 'records_lost'),
      ' · replayed ', num(fmtInt(t.records_replayed), t.records_replayed, 'records_replayed'),
      ' · duplicates dropped ', num(fmtInt(t.duplicates_dropped), t.duplicates_dropped, 'duplicates_dropped'),
      t.omitted ? h('span', { class: 'muted' }, ' · ' + t.omitted + ' earlier not listed') : null);
    const items = [];
    for (let i = list.length - 1; i >= 0; i--) items.push(failoverItem(list[i], i, parallelism));
    return h('section', { class: 'card side', id: 'failovers' },
      h('h2', {}, 'Failovers ', h('span', { class: 'count', text: String(t.failovers !== undefined ? t.failovers : list.length) })),
      list.length ? totals : null,
      list.length ? h('ol', { class: 'timeline', id: 'failover-list' }, items) : h('p', { class: 'muted', text: 'No failover: every task runs its first attempt.' }));
  }

  // restartedGroups groups a failover's restarted subtasks by vertex, in the API's order: "check[1]" and
  // "check[3]" are one group check with [1, 3].
  function restartedGroups(restarted) {
    const groups = new Map();
    for (const id of restarted || []) {
      const [name, idx] = splitSubtask(id);
      if (!groups.has(name)) groups.set(name, []);
      groups.get(name).push(idx);
    }
    return groups;
  }

  function failoverItem(f, i, parallelism) {
    const picked = state.failover === i;
    const facts = [
      ['outage', num(fmtMs(f.outage_ms), f.outage_ms, 'outage_ms')],
      ['recovery', num(fmtMs(f.recovery_ms), f.recovery_ms, 'recovery_ms')],
      ['checkpoint restored', present(f.checkpoint_restored) ? num(String(f.checkpoint_restored), f.checkpoint_restored, 'checkpoint_restored') : h('span', { class: 'num', 'data-field': 'checkpoint_restored', 'data-value': '', text: 'none' })],
    ];
    if (f.strategy === 'approximate' || f.records_lost) {
      facts.push(['records lost', num(fmtInt(f.records_lost), f.records_lost, 'records_lost')]);
      if (f.records_dropped) facts.push(['dropped in flight', num(fmtInt(f.records_dropped), f.records_dropped, 'records_dropped')]);
    }
    if (f.strategy === 'task' || f.records_replayed || f.duplicates_dropped) {
      facts.push(['replayed', num(fmtInt(f.records_replayed), f.records_replayed, 'records_replayed')]);
      facts.push(['duplicates dropped', num(fmtInt(f.duplicates_dropped), f.duplicates_dropped, 'duplicates_dropped')]);
    }
    const failed = (f.failed_subtasks && f.failed_subtasks.length ? f.failed_subtasks : [f.failed]).join(', ');
    const pick = () => { state.failover = picked ? null : i; render(); };
    return h('li', {
      class: 'failover' + (picked ? ' picked' : ''), 'data-failover-index': i, 'data-strategy': f.strategy, 'data-taskmanager': f.taskmanager || null, tabindex: 0,
      onclick: pick, onkeydown: (e) => { if (e.key === 'Enter') pick(); },
      // Redrawn only when the hovered failover changes: a redraw puts a new element under the pointer.
      onmouseenter: () => { if (state.hover !== i) { state.hover = i; render(); } },
      onmouseleave: () => { if (state.hover === i) { state.hover = null; render(); } },
    },
    h('div', { class: 'when' }, h('span', { class: 'time', text: fmtClock(f.failed_at) }), h('span', { class: 'badge strategy', text: f.strategy || DASH }),
      f.taskmanager ? h('span', { class: 'muted small', text: ' on ' + f.taskmanager }) : null),
    h('div', { class: 'what' }, h('span', { class: 'failed', 'data-field': 'failed', text: failed }), ' failed'),
    h('div', { class: 'cause', text: f.cause || '' }),
    // One chip per vertex, "check 2/16 [1, 3]": how few of its subtasks restarted is what approximate and
    // task failover are for. data-restarted keeps the API's list.
    h('div', { class: 'restarted-set', 'data-restarted': JSON.stringify(f.restarted || []) }, h('span', { class: 'muted small', text: 'restarted ' }),
      [...restartedGroups(f.restarted)].map(([name, idx]) => {
        const p = parallelism.get(name);
        const all = p && idx.length === p;
        return h('span', { class: 'chip', 'data-vertex': name, title: idx.map((x) => name + '[' + x + ']').join(', ') },
          h('b', { text: name }), ' ' + (p ? idx.length + '/' + p : '') + (all ? ' (all)' : ' [' + idx.join(', ') + ']'));
      })),
    h('dl', { class: 'ffacts' }, facts.map(([k, v]) => h('div', {}, h('dt', { text: k }), h('dd', {}, v)))),
    f.fallback ? h('div', { class: 'fallback', 'data-field': 'fallback' }, h('strong', { text: 'fallback: ' }), f.fallback) : null);
  }

  // ---- throughput over time ------------------------------------------------------------------------

  const CHART_W = 1180;
  const STRIP_H = 74;
  const PALETTE = ['#2f6fb3', '#c2571a', '#2b8a5b', '#8e44ad', '#b8860b', '#b03060', '#3a7d7d', '#555'];

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function throughputCard(doc, vertices, failovers) {
    const samples = (doc && doc.samples) || [];
    if (samples.length < 2) {
      return card('throughput', 'Throughput', h('p', { class: 'muted', text: 'Waiting for samples (one a second).' }));
    }
    // Each sample covers the interval that ends at its time: the window starts an interval before the
    // first, and spans at least half a minute so that a young job's few samples do not fill the width.
    const t1 = new Date(samples[samples.length - 1].at).getTime();
    const t0 = Math.min(new Date(samples[0].at).getTime() - ((doc && doc.interval_ms) || 0), t1 - 30000);
    const span = Math.max(1, t1 - t0);
    const left = 70;
    const right = 90;
    const plotW = CHART_W - left - right;
    const xOf = (t) => left + ((t - t0) / span) * plotW;
    const names = vertices.length ? vertices.map((v) => v.name) : (samples[samples.length - 1].vertices || []).map((v) => v.name);
    const height = names.length * (STRIP_H + 10) + 24;
    const svg = s('svg', { id: 'throughput-svg', viewBox: `0 0 ${CHART_W} ${height}`, width: '100%', role: 'img', 'aria-label': 'throughput per vertex' });
    names.forEach((name, vi) => {
      const top = vi * (STRIP_H + 10);
      const series = samples.map((sm) => {
        const v = (sm.vertices || []).find((x) => x.name === name);
        return { t: new Date(sm.at).getTime(), in: v ? v.records_in_per_s : null, out: v ? v.records_out_per_s : null, bp: v ? v.backpressured_ms_per_s : null };
      });
      const max = niceMax(Math.max(0, ...series.map((p) => Math.max(p.in || 0, p.out || 0))));
      const yOf = (x) => top + STRIP_H - (x / max) * (STRIP_H - 6);
      const line = (key) => series.filter((p) => present(p[key])).map((p, i) => (i ? 'L' : 'M') + xOf(p.t).toFixed(1) + ',' + yOf(p[key]).toFixed(1)).join(' ');
      const colour = PALETTE[vi % PALETTE.length];
      const last = series[series.length - 1];
      const strip = s('g', { class: 'strip', 'data-vertex': name },
        s('rect', { class: 'plot', x: left, y: top, width: plotW, height: STRIP_H }),
        s('line', { class: 'grid', x1: left, x2: left + plotW, y1: top + STRIP_H / 2 + 3, y2: top + STRIP_H / 2 + 3 }),
        s('text', { class: 'axis', x: left - 6, y: top + 10, 'text-anchor': 'end', text: fmtRate(max) }),
        s('text', { class: 'axis', x: left - 6, y: top + STRIP_H, 'text-anchor': 'end', text: '0' }),
        s('text', { class: 'sname', x: left + 6, y: top + 14, text: clip(name, 40) }),
        s('path', { class: 'in', d: line('in'), stroke: colour }),
        s('path', { class: 'out', d: line('out'), stroke: colour }),
        s('text', { class: 'now', x: left + plotW + 6, y: top + 14, fill: colour, text: 'out ' + fmtRate(last.out), 'data-field': 'records_out_per_s', 'data-value': present(last.out) ? last.out : '' }),
        s('text', { class: 'now muted', x: left + plotW + 6, y: top + 30, text: 'in ' + fmtRate(last.in), 'data-field': 'records_in_per_s', 'data-value': present(last.in) ? last.in : '' }));
      // Where the samples carry the vertex's backpressured time, a band along the strip's foot is as red
      // as the vertex was backpressured in each interval.
      const step = ((doc && doc.interval_ms) || 1000) / span * plotW;
      for (const p of series) {
        if (!present(p.bp) || p.bp <= 0) continue;
        strip.appendChild(s('rect', {
          class: 'bp-band', x: xOf(p.t) - step, y: top + STRIP_H - 5, width: step, height: 5, 'fill-opacity': Math.min(1, p.bp / 1000).toFixed(2),
          'data-value': p.bp,
        }, s('title', { text: 'backpressured ' + fmtPct(p.bp) })));
      }
      svg.appendChild(strip);
    });
    // Every failover in the window: a line where it failed, its outage shaded (at least 3 px, so a
    // failover of a few milliseconds still shows).
    const bottom = names.length * (STRIP_H + 10) - 10;
    failovers.forEach((f, i) => {
      const at = new Date(f.failed_at).getTime();
      if (at < t0 || at > t1) return;
      const x = xOf(at);
      const w = Math.max(3, ((f.outage_ms || 0) / span) * plotW);
      const active = state.failover === i || state.hover === i;
      svg.appendChild(s('g', { class: 'failover-mark' + (active ? ' active' : ''), 'data-failover-index': i },
        s('title', { text: fmtClock(f.failed_at) + ' ' + f.failed + ' failed (' + f.strategy + '), outage ' + fmtMs(f.outage_ms) }),
        s('rect', { class: 'outage', x, y: 0, width: w, height: bottom }),
        s('line', { x1: x, x2: x, y1: 0, y2: bottom }),
        s('text', { x: x + 4, y: bottom + 14, text: '⚡ ' + f.failed })));
    });
    for (let k = 0; k <= 5; k++) {
      const t = t0 + (span * k) / 5;
      svg.appendChild(s('text', { class: 'axis', x: xOf(t), y: height - 2, 'text-anchor': k === 0 ? 'start' : k === 5 ? 'end' : 'middle', text: fmtClock(t).slice(0, 8) }));
    }
    return h('section', { class: 'card', id: 'throughput' },
      h('h2', {}, 'Throughput ', h('span', { class: 'muted small', text: 'records per second, last ' + Math.round(span / 1000) + ' s · solid out, dashed in · red lines: failovers · red foot: backpressured' })),
      svg);
  }

  // ---- checkpoints ---------------------------------------------------------------------------------

  function checkpointsCard(doc, counts) {
    const c = (doc && doc.checkpoints) || counts || {};
    const history = (doc && doc.history) || [];
    const restored = doc ? doc.restored : null;
    const counts_ = h('dl', { class: 'facts', id: 'checkpoint-counts' },
      fact('Completed', num(fmtInt(c.completed), c.completed, 'completed')),
      fact('Failed', num(fmtInt(c.failed), c.failed, 'failed')),
      fact('Aborted', num(fmtInt(c.aborted), c.aborted, 'aborted')),
      fact('In progress', num(fmtInt(c.in_progress), c.in_progress, 'in_progress')),
      fact('Latest', num(present(c.last_completed_id) && c.last_completed_id ? String(c.last_completed_id) : DASH, c.last_completed_id, 'last_completed_id')),
      fact('Restored', num(present(restored) ? String(restored) : DASH, restored, 'restored')));
    if (!history.length && !present(c.completed)) {
      return h('section', { class: 'card', id: 'checkpoints' }, h('h2', { text: 'Checkpoints' }),
        h('p', { class: 'muted', id: 'checkpointing-off', text: 'Checkpointing is off for this job.' }));
    }
    if (!history.length) {
      return h('section', { class: 'card', id: 'checkpoints' }, h('h2', { text: 'Checkpoints' }), counts_,
        h('p', { class: 'muted small', text: 'No checkpoint history in the API.' }));
    }
    const rows = [];
    for (const k of history.slice().reverse()) {
      rows.push(h('tr', { 'data-checkpoint': k.id, 'data-checkpoint-status': k.status, class: k.reason ? 'has-failure' : null },
        h('td', { class: 'r' }, num(String(k.id), k.id, 'id')),
        h('td', {}, badge(k.status)),
        h('td', { text: fmtClock(k.trigger_time) }),
        h('td', { class: 'r' }, num(fmtMs(k.duration_ms), k.duration_ms, 'duration_ms')),
        h('td', { class: 'r' }, num(fmtMs(k.alignment_ms), k.alignment_ms, 'alignment_ms')),
        h('td', { class: 'r' }, num(fmtInt(k.acknowledged), k.acknowledged, 'acknowledged'), '/', num(fmtInt(k.expected), k.expected, 'expected')),
        h('td', { class: 'r' }, num(fmtBytes(k.state_bytes), k.state_bytes, 'state_bytes')),
        h('td', { class: 'r' }, num(fmtBytes(k.new_bytes), k.new_bytes, 'new_bytes')),
        h('td', { class: 'r' }, num(fmtBytes(k.channel_state_bytes), k.channel_state_bytes, 'channel_state_bytes'))));
      // A failure's reason takes a row of its own, under its checkpoint, so that the numbers keep their
      // columns.
      if (k.reason) rows.push(h('tr', { class: 'failure-row', 'data-failure-of': k.id }, h('td', {}), h('td', { colspan: 8, class: 'failure', text: k.reason })));
    }
    const table = h('div', { class: 'scroll' }, h('table', { id: 'checkpoint-table' },
      h('thead', {}, h('tr', {}, ['Id', 'Status', 'Triggered', 'Duration', 'Alignment', 'Acks', 'State', 'New', 'In flight'].map((t, i) =>
        h('th', { class: [0, 3, 4, 5, 6, 7, 8].includes(i) ? 'r' : null, text: t, title: i === 6 ? 'state the checkpoint refers to' : i === 7 ? 'state the checkpoint before did not refer to (what an incremental checkpoint writes afresh)' : i === 8 ? 'records in flight an unaligned checkpoint stored (channel state), part of its state' : null })))),
      h('tbody', {}, rows)));
    return h('section', { class: 'card', id: 'checkpoints' }, h('h2', { text: 'Checkpoints' }),
      h('div', { class: 'cp-layout' }, h('div', { class: 'cp-left' }, counts_, checkpointChart(history)), table));
  }

  // checkpointChart draws each checkpoint of the history as two bars: its duration above, its size below.
  function checkpointChart(history) {
    const shown = history.slice(-60);
    const W = 560;
    const H = 64;
    const left = 64;
    const bw = Math.max(2, Math.min(14, (W - left) / shown.length - 2));
    const maxD = niceMax(Math.max(0, ...shown.map((k) => k.duration_ms || 0)));
    const maxS = niceMax(Math.max(0, ...shown.map((k) => k.state_bytes || 0)));
    const svg = s('svg', { id: 'checkpoint-chart', viewBox: `0 0 ${W} ${2 * H + 28}`, width: '100%', role: 'img', 'aria-label': 'checkpoint durations and sizes' },
      s('text', { class: 'axis', x: left - 6, y: 10, 'text-anchor': 'end', text: fmtMs(maxD) }),
      s('text', { class: 'axis', x: left - 6, y: H, 'text-anchor': 'end', text: 'duration' }),
      s('text', { class: 'axis', x: left - 6, y: H + 24, 'text-anchor': 'end', text: fmtBytes(maxS) }),
      s('text', { class: 'axis', x: left - 6, y: 2 * H + 14, 'text-anchor': 'end', text: 'state' }));
    shown.forEach((k, i) => {
      const x = left + i * (bw + 2);
      const dh = ((k.duration_ms || 0) / maxD) * (H - 4);
      const sh = ((k.state_bytes || 0) / maxS) * (H - 4);
      const cls = 'bar s-' + String(k.status || '').toLowerCase();
      svg.appendChild(s('g', { 'data-checkpoint': k.id },
        s('title', { text: '#' + k.id + ' ' + k.status + ': ' + fmtMs(k.duration_ms) + ', ' + fmtBytes(k.state_bytes) }),
        s('rect', { class: cls, x, y: H - dh, width: bw, height: Math.max(dh, 0.5) }),
        s('rect', { class: cls + ' size', x, y: H + 14, width: bw, height: Math.max(sh, 0.5) })));
    });
    return svg;
  }

  // ---- exceptions ----------------------------------------------------------------------------------

  function exceptionsCard(doc) {
    const list = (doc && doc.exceptions) || [];
    return h('section', { class: 'card', id: 'exceptions' },
      h('h2', {}, 'Exceptions ', h('span', { class: 'count', text: String(list.length) })),
      list.length
        ? h('ol', { class: 'exceptions' }, list.map((e, i) => h('li', { 'data-exception-index': i },
          h('div', { class: 'when' }, h('span', { class: 'time', text: fmtClock(e.at) }), h('span', { class: 'mono', text: ' ' + (e.subtask || '') }),
            e.taskmanager ? h('span', { class: 'muted small', text: ' on ' + e.taskmanager }) : null),
          h('div', { class: 'err', text: e.error || '' }),
          e.stack ? h('pre', { class: 'stack', text: e.stack }) : null)))
        : h('p', { class: 'muted', text: 'No task failed.' }));
  }

  window.addEventListener('hashchange', navigate);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) {
      clearTimeout(state.timer);
      state.seq++;
      poll();
    }
  });
  navigate();
})();
