// offload serve dashboard: refreshes the server-rendered page from /api/stats, redraws the
// plots (the same specs as offload/serve/plots.py) and runs the store browser through
// /api/search, /api/entry and /api/entries. Stored or client text only ever goes in through
// textContent.
'use strict';
const CFG = JSON.parse(document.getElementById('dash-config').textContent);
const $ = id => document.getElementById(id);
const NS = $('savings-plot').namespaceURI;  // the SVG namespace, from the page's own plot
const DASH = '\u2014';
const fmt = {
  int: v => v == null ? DASH : Number(v).toLocaleString('en-US'),
  pct: v => v == null ? DASH : (v * 100).toFixed(1) + '%',
  text: v => v == null ? DASH : String(v),
  bytes: v => {
    if (v == null) return DASH;
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']; let i = 0;
    while (v >= 1024 && i < 4) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(v)) + ' ' + u[i];
  },
};
// a count and its noun, singular for one (offload/core/wording.py's counted, for the page)
const counted = (n, one, many) => fmt.int(n) + ' ' + (Number(n) === 1 ? one : (many || one + 's'));
function get(o, p) { for (const k of p.split('.')) { if (o == null) return null; o = o[k]; } return o; }
function ago(s) {
  s = Math.max(0, Math.round(s));
  return s < 60 ? s + 's' : s < 3600 ? Math.floor(s / 60) + 'm' :
    s < 86400 ? Math.floor(s / 3600) + 'h' : Math.floor(s / 86400) + 'd';
}
function compact(v) {
  const a = Math.abs(v);
  return a >= 1e6 ? (v / 1e6).toFixed(1) + 'M' : a >= 1e3 ? (v / 1e3).toFixed(1) + 'k' : String(Math.round(v));
}
function clock(at, span) {
  const d = new Date(at * 1000), two = n => String(n).padStart(2, '0');
  return two(d.getHours()) + ':' + two(d.getMinutes()) + (span < 600 ? ':' + two(d.getSeconds()) : '');
}
function el(tag, attrs, text) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  if (text != null) n.textContent = text;
  return n;
}
function sessionName(id, s) { return (s && s.title) ? s.title : 'session ' + id.slice(0, 8); }

// -- plots: the same specs and geometry as plots.py ------------------------------------------
const G = CFG.geometry;
function savingsSpec(proxy) {
  const rows = proxy.savings || []; const pts = []; let total = 0;
  for (const [at, client, wire] of rows) { total += Math.max(0, client - wire); pts.push([at, total]); }
  const span = pts.length ? pts[pts.length - 1][0] - pts[0][0] : 0;
  return {xmin: pts.length ? pts[0][0] : 0, xmax: pts.length ? pts[pts.length - 1][0] : 1,
    ymax: Math.max(total, 1) * 1.1, yfmt: 'tokens',
    xlabels: pts.length ? [clock(pts[0][0], span), clock(pts[pts.length - 1][0], span)] : [],
    lines: [{cls: 'saved', pts}], bars: [], hlines: [],
    empty: pts.length ? '' : 'no proxied requests yet'};
}
function occupancySpec(s, win, nctx) {
  const turns = s.turns || [];
  let size = 0;
  for (let i = turns.length - 1; i >= 0; i--) if (turns[i].n_ctx) { size = turns[i].n_ctx; break; }
  size = size || nctx || 0;
  const wire = turns.map((t, i) => [i + 1, t.wire_tokens || 0]);
  const client = turns.map((t, i) => [i + 1, t.client_tokens || 0]);
  const top = Math.max(size * 1.1, 1, ...wire.map(p => p[1]));  // client beyond it: clipped
  const hlines = size ? [{y: size, cls: 'n_ctx', label: 'n_ctx'}] : [];
  for (const [key, cls] of [['ceiling', 'ceiling'], ['high_water', 'high'], ['target', 'target']])
    if (size && typeof win[key] === 'number') hlines.push({y: win[key] * size, cls, label: cls});
  return {xmin: 1, xmax: Math.max(turns.length, 2), ymax: top * 1.05, yfmt: 'tokens',
    xlabels: turns.length ? ['turn 1', 'turn ' + turns.length] : [],
    lines: [{cls: 'client', pts: client}, {cls: 'wire', pts: wire}], bars: [], hlines,
    empty: turns.length ? '' : 'no turns recorded'};
}
function cacheSpec(s) {
  const turns = s.turns || []; const bars = [];
  turns.forEach((t, i) => { if (t.prompt_tokens && t.cached_tokens != null) bars.push([i + 1, 100 * t.cached_tokens / t.prompt_tokens]); });
  return {xmin: 0.5, xmax: turns.length + 0.5, ymax: 100, yfmt: 'pct',
    xlabels: turns.length ? ['turn 1', 'turn ' + turns.length] : [], lines: [],
    bars: [{cls: 'cache', pts: bars, n: turns.length}], hlines: [],
    empty: bars.length ? '' : 'the upstream reported no cache figures'};
}
function svgEl(tag, attrs, text) {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text != null) n.textContent = text;
  return n;
}
function draw(svg, spec) {
  const title = svg.querySelector('title');
  svg.replaceChildren();
  if (title) svg.appendChild(title);
  const iw = G.width - G.left - G.right, ih = G.height - G.top - G.bottom;
  const ymax = spec.ymax || 1;
  const sx = x => G.left + (spec.xmax > spec.xmin ? (x - spec.xmin) / (spec.xmax - spec.xmin) : 0.5) * iw;
  const sy = y => G.top + (1 - Math.min(y, ymax) / ymax) * ih;
  const fy = v => spec.yfmt === 'pct' ? Math.round(v) + '%' : compact(v);
  for (const f of [0, 0.5, 1]) {
    const y = sy(ymax * f).toFixed(1);
    svg.appendChild(svgEl('line', {class: 'axis', x1: G.left, x2: G.width - G.right, y1: y, y2: y}));
    svg.appendChild(svgEl('text', {x: G.left - 4, y: (+y + 4).toFixed(1), 'text-anchor': 'end'}, fy(ymax * f)));
  }
  if (spec.xlabels.length) {
    svg.appendChild(svgEl('text', {x: G.left, y: G.height - 6}, spec.xlabels[0]));
    svg.appendChild(svgEl('text', {x: G.width - G.right, y: G.height - 6, 'text-anchor': 'end'}, spec.xlabels[spec.xlabels.length - 1]));
  }
  for (const h of spec.hlines) {
    const y = sy(h.y).toFixed(1);
    svg.appendChild(svgEl('line', {class: h.cls, 'data-level': h.cls, x1: G.left, x2: G.width - G.right, y1: y, y2: y}));
    svg.appendChild(svgEl('text', {x: G.width - G.right - 2, y: (y - 3).toFixed(1), 'text-anchor': 'end'}, h.label));
  }
  for (const b of spec.bars) {
    const w = Math.max(1, iw / Math.max(b.n, 1) * 0.7);
    for (const [x, y] of b.pts) {
      const top = sy(y);
      svg.appendChild(svgEl('rect', {class: b.cls, 'data-series': b.cls, x: (sx(x) - w / 2).toFixed(1),
        y: top.toFixed(1), width: w.toFixed(1), height: (G.top + ih - top).toFixed(1)}));
    }
  }
  for (const l of spec.lines) {
    if (!l.pts.length) continue;
    svg.appendChild(svgEl('polyline', {class: l.cls, 'data-series': l.cls, 'data-points': l.pts.length,
      points: l.pts.map(([x, y]) => sx(x).toFixed(1) + ',' + sy(y).toFixed(1)).join(' ')}));
  }
  if (spec.empty) svg.appendChild(svgEl('text', {x: (G.left + iw / 2).toFixed(1), y: (G.top + ih / 2).toFixed(1), 'text-anchor': 'middle'}, spec.empty));
  svg.dataset.drawn = 'js';
}

// -- tables --------------------------------------------------------------------------------
const SESSION_HEADS = ['requests', 'client tokens', 'wire tokens', 'tokens saved', 'cache reuse', 'KV reuse', 'last seen'];
function sessionsTable(st) {
  const body = $('sessions'); body.replaceChildren();
  const all = Object.entries(get(st, 'proxy.sessions') || {}).slice(0, CFG.rows);
  for (const [id, s] of all) {
    const c = s.cumulative, tr = el('tr');
    const name = el('td', {class: 'full'}); name.appendChild(el('span', {}, sessionName(id, s)));
    name.appendChild(el('span', {class: 'muted'}, ' ' + id.slice(0, 8)));
    tr.appendChild(name);
    const cells = [fmt.int(c.counters.requests), fmt.int(c.counters.client_tokens),
      fmt.int(c.counters.wire_tokens), fmt.int(c.counters.tokens_saved), fmt.pct(c.cache_reuse_ratio),
      fmt.pct(c.kv_reuse_ratio), ago(st.now - s.last_seen) + ' ago'];
    cells.forEach((t, i) => tr.appendChild(el('td', {class: 'n', 'data-label': SESSION_HEADS[i]}, t)));
    body.appendChild(tr);
  }
  $('nosessions').hidden = all.length > 0;
}
function sessionPlots(st) {
  const box = $('session-plots'); const proxy = st.proxy || {};
  const win = proxy.window || {}, nctx = get(proxy, 'upstream.n_ctx');
  const shown = Object.entries(proxy.sessions || {}).filter(([, s]) => (s.turns || []).length).slice(0, CFG.plotSessions);
  box.replaceChildren();
  shown.forEach(([id, s], i) => {
    const card = el('div', {class: 'card', 'data-session': id});
    card.appendChild(el('h3', {}, sessionName(id, s)));
    card.appendChild(el('p', {class: 'muted'}, 'window occupancy per turn: wire tokens (solid) and what the client sent (dashed, clipped at the top) against n_ctx'));
    const occ = svgEl('svg', {class: 'plot', id: 'occupancy-' + i, viewBox: `0 0 ${G.width} ${G.height}`, role: 'img'});
    occ.appendChild(svgEl('title', {}, 'window occupancy of ' + sessionName(id, s)));
    card.appendChild(occ); draw(occ, occupancySpec(s, win, nctx));
    card.appendChild(el('p', {class: 'muted'}, 'cache reuse per turn: share of the prompt the upstream did not recompute'));
    const cache = svgEl('svg', {class: 'plot', id: 'cache-' + i, viewBox: `0 0 ${G.width} ${G.height}`, role: 'img'});
    cache.appendChild(svgEl('title', {}, 'cache reuse of ' + sessionName(id, s)));
    card.appendChild(cache); draw(cache, cacheSpec(s));
    box.appendChild(card);
  });
  $('noplots').hidden = shown.length > 0;
}
// -- levels: the same words as dashboard.py's levels() -------------------------------------
function windowLevel(c, nctx) {
  const n = fmt.int;
  if (!c.windowed) return ['ok', 'not needed yet', 'every prompt fit under the high water, so the model read each conversation whole.'];
  if (!c.emergency) return ['ok', 'normal', 'past the high water the proxy paged old turns out to the store in one bite, so' +
    " the prompt's start (and the model's cache) stays stable between page-outs (" + n(c.windowed) + ' of ' + n(c.requests) + ' requests).'];
  const size = Number.isInteger(nctx) ? ' (here ' + n(nctx) + ' tokens)' : '';
  return ['ok', 'at the ceiling, as designed', 'the proxy waits until a turn would break the ceiling and pages out once, deep (the' +
    ' high water sits just under it by default; when n_ctx is small' + size + " the band is too narrow anyway): the model's cache" +
    ' breaks as rarely as it can, and nothing is lost (the paged turns are in the store). Not a worry unless errors appear (' + n(c.emergency) + ' of ' +
    n(c.requests) + ' requests paged out at the ceiling, ' + n(c.windowed) + ' in all).'];
}
function cacheLevel(c, ratio) {
  if (ratio == null) return ['muted', 'not reported', 'the upstream reports no cache figures to judge.'];
  const pct = fmt.pct(ratio);
  if (c.requests < CFG.early) return ['muted', 'too early to judge', "a conversation's first request has nothing cached yet (" + pct + ' reused).'];
  if (ratio >= CFG.goodReuse) return ['ok', 'good', 'the model reused most of each prompt from its cache instead of recomputing it (' + pct + ' of prompt tokens).'];
  if (ratio >= CFG.fairReuse) return ['warn', 'fair', 'part of each prompt was recomputed (' + pct + ' reused): each page-out and prefix break costs one recompute; the causes are in Recent requests.'];
  return ['bad', 'low', 'most of each prompt was recomputed (' + pct + ' reused): look at the prefix breaks and their causes in Recent requests.'];
}
function levels(st) {
  const live = get(st, 'proxy.live') || {}, c = live.counters || {}, box = $('levels');
  let shown = [['proxy', 'muted', 'no requests yet', '']];
  if (c.requests) {
    shown = [['windowing', ...windowLevel(c, get(st, 'proxy.upstream.n_ctx'))],
      ['cache reuse', ...cacheLevel(c, live.cache_reuse_ratio)],
      ['errors', ...(c.errors ? ['bad', fmt.int(c.errors) + ' of ' + fmt.int(c.requests) + ' requests', "the proxy's log says why."]
        : ['ok', 'none', "every request got the model's answer."])]];
  }
  box.replaceChildren();
  for (const [name, cls, word, text] of shown) {
    const li = el('li'); li.appendChild(el('b', {}, name + ':')); li.append(' ');
    li.appendChild(el('span', {class: cls}, word)); if (text) li.append(' \u2014 ' + text);
    box.appendChild(li);
  }
}
function what(r) {
  const bits = [];
  if (r.error) bits.push('error');
  if (r.windowed) bits.push(r.emergency ? 'paged out at the ceiling' : 'paged out');
  if (r.break) bits.push('prefix break: ' + r.break);
  if (r.stubs_made) bits.push(r.stubs_made + ' new stubs');
  return bits.join(', ') || 'prefix kept';
}
function recentTable(st) {
  const body = $('recent'); const open = new Set();
  for (const d of body.querySelectorAll('details[open]')) open.add(d.dataset.key);
  body.replaceChildren();
  const sessions = get(st, 'proxy.sessions') || {};
  for (const r of get(st, 'proxy.recent') || []) {
    const key = r.session + ':' + r.at, tr = el('tr');
    tr.appendChild(el('td', {class: 'n'}, ago(st.now - r.at) + ' ago'));
    tr.appendChild(el('td', {}, sessionName(r.session, {title: r.title || (sessions[r.session] || {}).title})));
    tr.appendChild(el('td', {class: 'n', 'data-label': 'client \u2192 wire tokens'}, fmt.int(r.client_tokens) + ' \u2192 ' + fmt.int(r.wire_tokens)));
    tr.appendChild(el('td', {class: 'n', 'data-label': 'saved'}, fmt.int(Math.max(0, r.client_tokens - r.wire_tokens))));
    tr.appendChild(el('td', {class: 'n', 'data-label': 'cache reuse'}, r.prompt_tokens ? fmt.pct(r.cached_tokens / r.prompt_tokens) : DASH));
    const cell = el('td', {class: 'full'});
    const det = el('details', {'data-key': key}); if (open.has(key)) det.open = true;
    det.appendChild(el('summary', {}, what(r) + ' \u00b7 ' + stubCount(r.stubbed_messages || 0)));
    const ul = el('ul', {class: 'stubs'});
    for (const line of r.stubs || []) {
      const li = el('li', {}, line + ' ');
      const ref = stubRef(line);
      if (ref) { const a = el('a', {href: '?entry=' + encodeURIComponent(ref) + '#store', 'data-ref': ref}, 'open'); li.appendChild(a); }
      ul.appendChild(li);
    }
    if (!(r.stubs || []).length) ul.appendChild(el('li', {class: 'muted'}, 'nothing stubbed or paged: the wire is what the client sent'));
    else if (r.stubbed_messages > r.stubs.length) ul.appendChild(el('li', {class: 'muted'}, '\u2026 and ' + (r.stubbed_messages - r.stubs.length) + ' more'));
    det.appendChild(ul); cell.appendChild(det); tr.appendChild(cell);
    body.appendChild(tr);
  }
  $('norecent').hidden = body.children.length > 0;
}
function stubCount(n) { return n + (n === 1 ? ' stub' : ' stubs') + ' on the wire'; }
function stubRef(line) {
  const i = line.lastIndexOf('stored as ');
  return i < 0 ? '' : line.slice(i + 10).split(']')[0].trim();
}

// -- store browser -------------------------------------------------------------------------
function headers() {
  const h = {}, t = sessionStorage.getItem('offload-token');
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}
// The store browser's views have URLs: ?q=... (hits), ?entry=REF (one entry), otherwise a page
// of entries (?kind=...&pinned=1&page=N). Navigating pushes the URL, so Back returns to the
// hits or the list; loading or going back to a URL shows its view (show()).
function entryLi(ref, name, meta) {
  const li = el('li', {'data-ref': ref});
  li.appendChild(el('a', {href: '?entry=' + encodeURIComponent(ref) + everyScope() + '#store', 'data-ref': ref}, name));
  li.appendChild(el('span', {class: 'muted'}, ' ' + meta));
  return li;
}
function entryName(e) { return e.topic || (e.labels || [])[0] || e.ref; }
function listView(on) {
  $('entry').hidden = on; $('hits').hidden = !on; $('search-note').hidden = !on; $('pager').hidden = !on;
}
async function getJson(url) {
  const r = await fetch(url, {headers: headers()});
  if (r.status === 401) { $('auth').hidden = false; throw new Error('the store browser needs the proxy bearer token: paste it above'); }
  return [r, await r.json()];
}
async function search(q) {
  const list = $('hits'), note = $('search-note');
  listView(true); $('filters').hidden = true; $('pager').replaceChildren();
  list.replaceChildren(); note.textContent = 'searching\u2026';
  const [r, data] = await getJson('/api/search?q=' + encodeURIComponent(q) + everyScope());
  if (!r.ok) { note.textContent = data.error || ('search failed: ' + r.status); return; }
  note.textContent = (data.hits.length ? counted(data.hits.length, 'hit') + ' for \u201c' + q + '\u201d' : 'no hits for \u201c' + q + '\u201d') + scopeNote(data);
  for (const h of data.hits) {
    const li = entryLi(h.ref, entryName(h), h.ref + ' \u00b7 ' + h.kind + ' \u00b7 ' + counted(h.tokens, 'token') + ' \u00b7 line ' + h.match_line);
    li.appendChild(el('pre', {}, h.snippet));
    list.appendChild(li);
  }
}
// the served scope by default, as the CLI and the MCP tools; the box asks for every scope
function everyScope() { return $('all-scopes').checked ? '&all_scopes=1' : ''; }
function scopeNote(data) {
  if (data.scope === null) return ' in every scope';
  const more = data.other_scopes.hits;
  return ' in scope ' + data.scope + (more ? '; ' + more + ' more in other scopes: tick \u201cevery scope\u201d' : '');
}
function navHref(kind, pinned, page) {
  const p = [];
  if (kind) p.push('kind=' + encodeURIComponent(kind));
  if (pinned) p.push('pinned=1');
  if (page > 1) p.push('page=' + page);
  if (everyScope()) p.push('all_scopes=1');
  return p.length ? '?' + p.join('&') + '#store' : './#store';
}
function navLink(href, text, count, current) {
  const a = el('a', {href, 'data-nav': ''}, text);
  if (count != null) a.appendChild(el('span', {class: 'muted'}, ' ' + fmt.int(count)));
  if (current) a.setAttribute('aria-current', 'page');
  return a;
}
async function browse(params) {
  const list = $('hits'), note = $('search-note'), filters = $('filters'), pager = $('pager');
  listView(true);
  const [r, data] = await getJson('/api/entries?' + params.toString());
  list.replaceChildren(); pager.replaceChildren(); filters.replaceChildren('browse:');
  if (!r.ok) { note.textContent = data.error || ('listing failed: ' + r.status); return; }
  const links = [['all', '', false, data.all], ['pinned', '', true, data.all_pinned],
    ...Object.entries(data.kinds).map(([k, n]) => [k, k, false, n])];
  for (const [label, k, p, n] of links) {
    filters.append(' '); filters.appendChild(navLink(navHref(k, p, 1), label, n, k === data.kind && p === data.pinned));
  }
  filters.hidden = false;
  const what = (data.kind ? data.kind + ' ' : '') + (data.pinned ? 'pinned entries' : 'entries');
  const first = (data.page - 1) * data.page_size + 1, n = data.entries.length;
  note.textContent = n ? what + ' ' + first + '\u2013' + (first + n - 1) + ' of ' + fmt.int(data.total) + ', pinned first, then by salience and last use'
    : 'no ' + what + (data.total ? ' on this page' : ' yet');
  for (const e of data.entries)
    list.appendChild(entryLi(e.ref, entryName(e), [...(entryName(e) === e.ref ? [] : [e.ref]), e.kind,
      counted(e.tokens, 'token'), ...(e.pinned ? ['pinned'] : [])].join(' \u00b7 ')));
  if (data.page > 1) { pager.appendChild(navLink(navHref(data.kind, data.pinned, data.page - 1), '\u2190 previous page')); pager.append(' '); }
  if (data.page * data.page_size < data.total) pager.appendChild(navLink(navHref(data.kind, data.pinned, data.page + 1), 'next page \u2192'));
}
async function openEntry(ref) {
  listView(false); $('filters').hidden = true;
  const [r, data] = await getJson('/api/entry?ref=' + encodeURIComponent(ref) + everyScope());
  if (!r.ok) { $('entry-head').textContent = data.error || ('open failed: ' + r.status); $('entry-text').textContent = ''; return; }
  const e = data.entry;
  $('entry-head').textContent = entryName(e) + ' \u2014 ' + e.ref + ' \u00b7 ' + e.kind + ' \u00b7 ' + counted(e.tokens, 'token') + ', ' + counted(e.lines, 'line') + (e.source ? ' \u00b7 from ' + e.source : '');
  $('entry-text').textContent = data.text + (data.truncated ? '\n\u2026 (shown: the first ' + fmt.int(data.text.length) + ' characters)' : '');
}
function show() {
  const p = new URLSearchParams(location.search), q = (p.get('q') || '').trim(), ref = (p.get('entry') || '').trim();
  $('q').value = q;
  $('all-scopes').checked = ['1', 'true', 'on'].includes((p.get('all_scopes') || '').toLowerCase());
  const view = ref ? openEntry(ref) : q ? search(q) : browse(p);
  return view.catch(err => { $('search-note').hidden = false; $('search-note').textContent = err.message || String(err); });
}
function go(href) {
  history.pushState({dash: true}, '', href);
  show().then(() => $('store').scrollIntoView({block: 'start'}));
}
$('search').addEventListener('submit', e => {
  e.preventDefault(); const q = $('q').value.trim();
  go(q ? '?q=' + encodeURIComponent(q) + everyScope() + '#store' : (everyScope() ? '?' + everyScope().slice(1) + '#store' : './#store'));
});
document.addEventListener('click', e => {
  const a = e.target.closest('a[data-ref], a[data-nav]');
  if (a && !(e.ctrlKey || e.metaKey || e.shiftKey || e.button)) { e.preventDefault(); go(a.getAttribute('href')); }
});
$('back').addEventListener('click', e => {
  // back to the hits or the list this entry was opened from, else to the list
  if (history.state && history.state.dash) { e.preventDefault(); history.back(); }
});
window.addEventListener('popstate', () => { show(); });
show();

// -- refresh ------------------------------------------------------------------------------
async function poll() {
  try {
    const r = await fetch('/api/stats', {headers: headers()});
    if (r.status === 401) { $('auth').hidden = false; return; }
    const st = await r.json();
    $('auth').hidden = true;
    for (const n of document.querySelectorAll('[data-k]')) n.textContent = fmt[n.dataset.f](get(st, n.dataset.k));
    levels(st); sessionsTable(st); recentTable(st); sessionPlots(st);
    draw($('savings-plot'), savingsSpec(st.proxy || {}));
    $('at').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (err) { $('at').textContent = 'not answering: ' + err; }
}
$('auth').addEventListener('submit', e => { e.preventDefault(); sessionStorage.setItem('offload-token', $('tok').value); poll(); show(); });
poll(); setInterval(poll, CFG.pollMs);
