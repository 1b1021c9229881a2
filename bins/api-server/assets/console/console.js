// The operator console. Plain DOM and SVG, no dependencies: the page's CSP
// allows only this file as script, console.css as style and calls to this
// origin. The API key lives in sessionStorage and travels only in the
// Authorization header.
'use strict';

(() => {
  const KEY = 'console.apiKey';
  const TENANT = 'console.tenantId';
  const HOUR = 3600 * 1000;
  const DAY = 24 * HOUR;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);

  // `seq` numbers each panel's loads, so a slow answer never replaces a newer one.
  const state = {
    key: null, tenant: null, root: false, now: 0, view: null,
    seq: { timeline: 0, usage: 0, preview: 0, instances: 0 },
  };
  // An instance's states but `deleted` (the states filter of instances.list).
  const LIVE_STATES = ['provisioning', 'running', 'stopping', 'stopped', 'starting', 'deleting',
    'failed'];
  // The grant notices of contract 9, read from the signed-in tenant's event log.
  const NOTICE_TYPES = ['reservation-grant.expiring', 'reservation-grant.underused'];

  // ------------------------------------------------------------------ DOM

  function build(el, attrs, kids) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const h = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
  const s = (tag, attrs, ...kids) => build(document.createElementNS(SVG_NS, tag), attrs, kids);

  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(ms) {
    if (typeof ms !== 'number') return '—';
    const d = new Date(ms);
    return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
      `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}Z`;
  }
  const num = (v) => (typeof v === 'number' ? String(v) : '—');
  const shortId = (id) => (id && id.length > 16 ? `${id.slice(0, 12)}…${id.slice(-4)}` : id);
  const lastPart = (id) => String(id).split('/').pop();

  // Exact sums of the API's 6-decimal strings, in micro-units.
  function micros(text) {
    const [whole, frac = ''] = String(text).split('.');
    return BigInt(whole) * 1000000n + BigInt((frac + '000000').slice(0, 6));
  }
  const fmtMicros = (m) => `${m / 1000000n}.${String(m % 1000000n).padStart(6, '0')}`;

  // A 6-decimal ratio ("0.412500") as an exact percentage ("41.25 %").
  function fmtPercent(text) {
    if (typeof text !== 'string' || !/^[0-9]+\.[0-9]{6}$/.test(text)) return '—';
    const m = micros(text);
    const frac = String(m % 10000n).padStart(4, '0').replace(/0+$/, '');
    return `${m / 10000n}${frac ? `.${frac}` : ''} %`;
  }

  // A datetime-local value read as UTC ("2026-12-01T19:30") in epoch ms; null if not one.
  function utcMillis(value) {
    const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?$/
      .exec(value || '');
    if (!m) return null;
    const [y, mo, d, hh, mm, ss, ms] = m.slice(1).map((p) => Number(p || 0));
    return Date.UTC(y, mo - 1, d, hh, mm, ss, ms);
  }
  const utcInput = (ms) => new Date(ms).toISOString().slice(0, 16);

  function table(columns, rows, attrs) {
    return h('table', attrs,
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)))),
      h('tbody', {}, rows));
  }

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(code, message, status, requestId) {
      super(message);
      this.code = code;
      this.status = status;
      this.requestId = requestId;
    }
  }

  async function api(path, body) {
    let resp;
    try {
      resp = await fetch(`/api/compute/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${state.key}` },
        body: JSON.stringify({ tenantId: state.tenant, ...(body || {}) }),
        cache: 'no-store',
        credentials: 'omit',
      });
    } catch (e) {
      throw new ApiError('NETWORK', `could not reach the server (${e.message})`, 0, null);
    }
    const requestId = resp.headers.get('x-request-id');
    let data = null;
    try { data = await resp.json(); } catch (_) { data = null; }
    if (resp.ok && data) return data;
    const err = data && data.error;
    // A key the server no longer accepts is dropped at once, whatever asked.
    if (resp.status === 401) forget();
    if (err && err.code) throw new ApiError(err.code, err.message, resp.status, requestId);
    throw new ApiError(`HTTP_${resp.status}`, `the server answered HTTP ${resp.status}`,
      resp.status, requestId);
  }

  // Every page of reservationGrants.list (it pages once it has a cursor).
  async function listGrants(body) {
    const out = [];
    let page = await api('reservationGrants/list', body);
    out.push(...page.items);
    while (page.hasMore === true && page.nextCursor) {
      page = await api('reservationGrants/list', { ...body, after: page.nextCursor });
      out.push(...page.items);
    }
    return out;
  }

  // Every page of instances.list with `body`'s filters.
  async function listInstances(body) {
    const out = [];
    let page = await api('instances/list', body);
    out.push(...page.items);
    while (page.hasMore === true && page.nextCursor && page.items.length > 0) {
      page = await api('instances/list', { ...body, after: page.nextCursor });
      out.push(...page.items);
    }
    return out;
  }

  // Every page of events.list with `body`'s filters, oldest first.
  async function listEvents(body) {
    const out = [];
    let page = await api('events/list', { limit: 1000, ...body });
    out.push(...page.items);
    while (page.hasMore === true && page.nextCursor && page.items.length > 0) {
      page = await api('events/list', { limit: 1000, ...body, after: page.nextCursor });
      out.push(...page.items);
    }
    return out;
  }

  function showError(e, doing) {
    let text;
    if (e && e.code === 'UNAUTHENTICATED') text = 'That key was not accepted (UNAUTHENTICATED).';
    else if (e instanceof ApiError) text = `${doing} failed: ${e.message} (${e.code}).`;
    else text = `${doing} failed: ${e && e.message ? e.message : e}.`;
    const box = $('error');
    box.replaceChildren(h('span', {}, text),
      e && e.code === 'UNAUTHENTICATED' && e.message ? h('span', { class: 'detail' }, e.message) : null,
      e && e.requestId ? h('span', { class: 'detail' }, `request ${e.requestId}`) : null);
    box.hidden = false;
  }
  function clearError() {
    $('error').hidden = true;
    $('error').replaceChildren();
  }

  // ------------------------------------------------------------- sign in

  async function signIn(key, tenant) {
    state.key = key;
    state.tenant = tenant;
    clearError();
    try {
      // tenants.list answers only in the root tenant: that tells the views apart.
      let tenants = null;
      try {
        tenants = await api('tenants/list');
      } catch (e) {
        if (e.code !== 'ACCESS_DENIED') throw e;
      }
      state.root = tenants !== null;
      sessionStorage.setItem(KEY, key);
      sessionStorage.setItem(TENANT, tenant);
      $('signin').hidden = true;
      $('forget').hidden = false;
      $('who').textContent = `tenant ${tenant}${state.root ? ' (root)' : ''}`;
      await refreshNow();
      if (state.root) await loadRoot();
      else await loadTenant();
    } catch (e) {
      showError(e, 'Loading');
    }
  }

  function forget() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(TENANT);
    state.key = null;
    state.view = null;
    state.seq.timeline += 1;
    state.seq.usage += 1;
    state.seq.preview += 1;
    state.seq.instances += 1;
    $('key').value = '';
    $('who').textContent = '';
    $('forget').hidden = true;
    $('signin').hidden = false;
    for (const id of ['root-view', 'grants-view', 'timeline-panel', 'usage-panel', 'preview-box']) {
      $(id).hidden = true;
    }
    for (const id of ['pools', 'reservations', 'grants', 'timeline', 'usage', 'notices',
      'preview-result', 'instances']) {
      $(id).replaceChildren();
    }
    for (const id of ['pv-tenant', 'pv-project', 'pv-start', 'pv-end']) $(id).value = '';
    $('pv-slots').value = '1';
  }

  // Root reads the server's clock (manual in demos); a tenant cannot, and uses its own.
  async function refreshNow() {
    state.now = Date.now();
    if (!state.root) return;
    try {
      state.now = (await api('clock/get')).now;
    } catch (_) { /* a root key without fleet rights: keep the browser's time */ }
  }

  // ---------------------------------------------------------------- lists

  async function loadRoot() {
    const [pools, accounts, grants] = await Promise.all([
      api('pools/list'), api('providerAccounts/list'), listGrants({ all: true }),
    ]);
    const perAccount = await Promise.all(accounts.items.map((a) =>
      api('providerAccounts/listReservations', { accountId: a.accountId })
        .then((r) => r.items.map((res) => ({ ...res, accountName: a.name })))));
    $('pools').replaceChildren(table(['Pool', 'Name', 'Region', 'Flavors', 'Offered to'],
      pools.items.map((p) => h('tr', { 'data-testid': 'pool-row', 'data-pool-id': p.poolId },
        h('td', { title: p.poolId }, shortId(p.poolId)), h('td', {}, p.name), h('td', {}, p.region),
        h('td', {}, p.flavors.map((f) => f.name).join(', ')),
        h('td', {}, p.offeredTo.join(', ') || '—')))));
    const cols = ['Reservation', 'Account', 'Zone', 'Flavor', 'Total', 'Status', 'Pool',
      'Granted', 'Held in grants', 'Ordinary in use', 'Ordinary free', 'Physical in use', ''];
    $('reservations').replaceChildren(table(cols, perAccount.flat().map((r) => {
      const open = () => openTimeline(r.accountId, r.reservationId);
      return h('tr', {
        'data-testid': 'reservation-row', 'data-reservation-id': r.reservationId,
        'data-account-id': r.accountId, class: 'clickable', onclick: open,
      },
      h('td', { title: r.reservationId }, lastPart(r.reservationId)),
      h('td', { title: r.accountId }, r.accountName), h('td', {}, r.zone), h('td', {}, r.flavor),
      h('td', { class: 'n' }, num(r.total)), h('td', { class: `status ${r.status}` }, r.status),
      h('td', { title: r.poolId || '' }, r.poolId ? shortId(r.poolId) : '—'),
      ['grantedSlots', 'heldInGrants', 'ordinaryInUse', 'ordinaryFree', 'physicalInUse']
        .map((k) => h('td', { class: 'n', 'data-field': k }, num(r[k]))),
      h('td', {}, h('button', { type: 'button', 'data-testid': 'open-timeline' }, 'Timeline')));
    })));
    showGrants('All reservation grants', grants);
    $('root-view').hidden = false;
  }

  async function loadTenant() {
    showGrants(`Grants of ${state.tenant}`, await listGrants({}));
  }

  function showGrants(title, grants) {
    $('grants-title').textContent = title;
    const cols = ['Grant', 'Tenant', 'Reservation', 'Slots', 'Starts', 'Ends', 'State', ''];
    $('grants').replaceChildren(grants.length === 0 ? h('p', { class: 'muted' }, 'No grants.')
      : table(cols, grants.map((g) => h('tr', {
        'data-testid': 'grant-row', 'data-grant-id': g.grantId, 'data-tenant-id': g.tenantId,
        class: 'clickable', onclick: () => showUsage(g),
      },
      h('td', { title: g.grantId }, shortId(g.grantId)), h('td', {}, g.tenantId),
      h('td', { title: g.reservationId }, lastPart(g.reservationId)),
      h('td', { class: 'n' }, g.slots), h('td', {}, fmtTime(g.startsAt)),
      h('td', {}, fmtTime(g.endsAt)), h('td', { class: `state ${g.state}` }, g.state),
      h('td', {}, h('button', {
        type: 'button', 'data-testid': 'grant-timeline',
        onclick: (ev) => { ev.stopPropagation(); openTimeline(g.accountId, g.reservationId); },
      }, 'Timeline'))))));
    $('grants-view').hidden = false;
  }

  // ------------------------------------------------------------- timeline

  function openTimeline(accountId, reservationId) {
    state.view = { accountId, reservationId, from: state.now - 14 * DAY, to: state.now + 30 * DAY };
    $('timeline-panel').hidden = false;
    $('timeline-title').textContent = reservationId;
    showPreviewForm();
    drawTimeline();
    showInstances();
  }

  // The instances on the open reservation but deleted ones (root: every tenant's), with
  // their states and, for a managed pool's, their VMs.
  async function showInstances() {
    const v = state.view;
    const seq = ++state.seq.instances;
    $('instances').replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      const items = await listInstances({
        reservationId: v.reservationId, states: LIVE_STATES, ...(state.root ? { all: true } : {}),
      });
      if (seq !== state.seq.instances) return;
      const cols = ['Instance', 'Tenant', 'Name', 'Flavor', 'State', 'Placement', 'VM', 'Zone',
        'VM status'];
      $('instances').replaceChildren(items.length === 0
        ? h('p', { class: 'muted' }, 'No instances.')
        : table(cols, items.map((i) => h('tr', {
          'data-testid': 'instance-row', 'data-instance-id': i.instanceId, 'data-state': i.state,
        },
        h('td', { title: i.instanceId }, shortId(i.instanceId)), h('td', {}, i.tenantId),
        h('td', {}, i.name), h('td', {}, i.flavor),
        h('td', { class: `state ${i.state}`, 'data-field': 'state',
          title: i.failure ? i.failure.code : null },
        i.failure ? `${i.state} (${i.failure.code})` : i.state),
        h('td', {}, i.placement.kind),
        h('td', { 'data-field': 'vm' }, i.vm ? i.vm.name : '—'),
        h('td', {}, i.vm ? i.vm.zone : '—'),
        h('td', {}, i.vm && i.vm.status ? i.vm.status : '—'))),
        { 'data-testid': 'instances-table' }));
    } catch (e) {
      if (seq !== state.seq.instances) return;
      $('instances').replaceChildren();
      showError(e, 'Listing the instances');
    }
  }

  function shift(days) {
    if (!state.view) return;
    state.view.from += days * DAY;
    state.view.to += days * DAY;
    drawTimeline();
  }

  async function drawTimeline() {
    const v = state.view;
    const seq = ++state.seq.timeline;
    $('tl-range').textContent = `${fmtTime(v.from)} to ${fmtTime(v.to)}`;
    $('timeline').replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      await refreshNow();
      const r = await api('reservations/timeline', {
        accountId: v.accountId, reservationId: v.reservationId, from: v.from, to: v.to,
      });
      if (seq !== state.seq.timeline) return;
      $('timeline').replaceChildren(timelineSvg(r.timeline, state.now));
      $('timeline-panel').scrollIntoView({ block: 'start' });
    } catch (e) {
      if (seq !== state.seq.timeline) return;
      $('timeline').replaceChildren();
      showError(e, 'Drawing the timeline');
    }
  }

  const hue = (text) => [...String(text)].reduce((a, c) => (a * 31 + c.charCodeAt(0)) % 360, 7);

  function axisStep(span) {
    const steps = [HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY, 30 * DAY];
    return steps.find((st) => span / st <= 12) || 90 * DAY;
  }

  // Rows of grants per tenant, each row split in lanes so overlapping grants stack.
  function grantRows(grants) {
    const byTenant = new Map();
    for (const g of [...grants].sort((a, b) => a.startsAt - b.startsAt)) {
      const who = g.tenantId === undefined ? '' : g.tenantId;
      if (!byTenant.has(who)) byTenant.set(who, []);
      const lanes = byTenant.get(who);
      let lane = lanes.find((l) => l[l.length - 1].endsAt <= g.startsAt);
      if (!lane) { lane = []; lanes.push(lane); }
      lane.push(g);
    }
    return [...byTenant.entries()].sort(([a], [b]) => (a === '') - (b === '') || a.localeCompare(b));
  }

  function timelineSvg(tl, now) {
    const W = 1100; const L = 160; const R = 24; const LANE = 22; const CH = 140;
    const x = (t) => L + ((Math.min(Math.max(t, tl.from), tl.to) - tl.from) / (tl.to - tl.from)) * (W - L - R);
    const rows = grantRows(tl.grants);
    const rowsTop = 34;
    let y = rowsTop;
    const bars = [];
    for (const [who, lanes] of rows) {
      const height = lanes.length * LANE + 6;
      bars.push(s('text', { x: 8, y: y + 16, class: 'row-label' }, who || 'other tenants'),
        s('line', { x1: 0, x2: W, y1: y + height, y2: y + height, class: 'row-rule' }));
      lanes.forEach((lane, i) => lane.forEach((g) => bars.push(grantBar(g, x, y + 3 + i * LANE))));
      y += height;
    }
    const chartTop = y + 28;
    const bottom = chartTop + CH;
    const top = Math.max(tl.total, ...tl.committed.map((c) => c.slots),
      ...tl.inUse.map((u) => u.inGrants + u.ordinary), 1);
    const yv = (val) => bottom - (val / top) * (CH - 10);
    const step = (segs, val) => segs.length === 0 ? '' : segs.map((sg, i) =>
      `${i === 0 ? 'M' : 'L'}${x(sg.from).toFixed(1)},${yv(val(sg)).toFixed(1)}` +
      `L${x(sg.to).toFixed(1)},${yv(val(sg)).toFixed(1)}`).join('');
    const committed = step(tl.committed, (c) => c.slots);
    const last = tl.committed[tl.committed.length - 1];
    const area = committed && `${committed}L${x(last.to)},${bottom}L${x(tl.committed[0].from)},${bottom}Z`;
    const startTick = Math.ceil(tl.from / axisStep(tl.to - tl.from)) * axisStep(tl.to - tl.from);
    const ticks = [];
    for (let t = startTick; t < tl.to; t += axisStep(tl.to - tl.from)) {
      const label = fmtTime(t).slice(5, axisStep(tl.to - tl.from) >= DAY ? 10 : 16);
      ticks.push(s('line', { x1: x(t), x2: x(t), y1: 20, y2: bottom, class: 'grid' }),
        s('text', { x: x(t) + 3, y: 14, class: 'tick' }, label));
    }
    const markers = tl.events.map((ev) => eventMarker(ev, x(ev.at), chartTop, bottom));
    const nowX = x(now);
    const inNow = now >= tl.from && now < tl.to;
    return s('svg', {
      viewBox: `0 0 ${W} ${bottom + 24}`, width: W, height: bottom + 24, class: 'timeline',
      'data-testid': 'timeline', 'data-reservation-id': tl.reservationId, role: 'img',
    },
    s('defs', {}, s('pattern', {
      id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
      patternTransform: 'rotate(45)',
    }, s('rect', { width: 6, height: 6, class: 'hatch-bg' }),
    s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'hatch-line' }))),
    ticks, bars,
    s('text', { x: 8, y: chartTop + 12, class: 'row-label' }, 'slots'),
    s('line', { x1: L, x2: W - R, y1: bottom, y2: bottom, class: 'axis' }),
    area ? s('path', { d: area, class: 'committed', 'data-testid': 'committed' }) : null,
    s('path', { d: step(tl.inUse, (u) => u.inGrants), class: 'in-grants', 'data-testid': 'in-grants' }),
    s('path', {
      d: step(tl.inUse, (u) => u.inGrants + u.ordinary), class: 'in-use', 'data-testid': 'in-use',
    }),
    s('line', {
      x1: L, x2: W - R, y1: yv(tl.total), y2: yv(tl.total), class: 'total', 'data-testid': 'total-line',
    }),
    s('text', { x: L - 6, y: yv(tl.total) + 4, class: 'tick end' }, `total ${tl.total}`),
    s('text', { x: L - 6, y: bottom + 4, class: 'tick end' }, '0'),
    markers,
    inNow ? [s('line', { x1: nowX, x2: nowX, y1: 18, y2: bottom + 6, class: 'now', 'data-testid': 'now-line' }),
      s('text', { x: nowX + 3, y: bottom + 18, class: 'tick now-label' }, `now ${fmtTime(now)}`)] : null);
  }

  function grantBar(g, x, y) {
    const x0 = x(g.startsAt);
    const width = Math.max(x(g.endsAt) - x0, 2);
    const anonymous = !g.grantId;
    const cancelled = g.state === 'cancelled';
    const label = anonymous ? `${g.slots} slots` : `${g.tenantId} · ${g.slots}`;
    const title = anonymous
      ? `another tenant's grant: ${g.slots} slots, ${fmtTime(g.startsAt)} to ${fmtTime(g.endsAt)}`
      : `${g.grantId} (${g.state}${g.reason ? `, ${g.reason}` : ''}): ${g.tenantId}, ${g.slots} ` +
        `slots, ${fmtTime(g.startsAt)} to ${fmtTime(g.endsAt)}`;
    const fill = anonymous ? null : cancelled ? 'url(#hatch)' : `hsl(${hue(g.tenantId)} 55% 62%)`;
    return s('g', {
      class: `grant${anonymous ? ' anonymous' : ' clickable'}${cancelled ? ' cancelled' : ''}`,
      onclick: anonymous ? null : () => showUsage(g),
    },
    s('rect', {
      x: x0, y, width, height: 18, rx: 3, fill, class: `bar ${g.state || ''}`,
      'data-testid': 'grant-bar', 'data-grant-id': g.grantId, 'data-tenant-id': g.tenantId,
      'data-state': g.state,
    }, s('title', {}, title)),
    s('text', { x: x0 + 4, y: y + 13, class: 'bar-label' }, label));
  }

  function eventMarker(ev, xe, top, bottom) {
    const kind = /capacity-short/.test(ev.type) ? 'short' : /gone/.test(ev.type) ? 'gone' : 'other';
    const title = s('title', {}, `${ev.type} at ${fmtTime(ev.at)}${ev.grantId ? ` (${ev.grantId})` : ''}`);
    const attrs = { class: `event ${kind}`, 'data-testid': 'event-marker', 'data-type': ev.type };
    if (kind === 'other') return s('circle', { ...attrs, cx: xe, cy: bottom, r: 3 }, title);
    const d = kind === 'short' ? `M${xe - 6},${top - 10}L${xe + 6},${top - 10}L${xe},${top}Z`
      : `M${xe - 5},${top - 10}L${xe + 5},${top}M${xe + 5},${top - 10}L${xe - 5},${top}`;
    return s('g', attrs, s('path', { d }), s('line', { x1: xe, x2: xe, y1: top, y2: bottom }), title);
  }

  // ---------------------------------------------------------------- usage

  async function showUsage(g) {
    const seq = ++state.seq.usage;
    $('usage-panel').hidden = false;
    $('usage-title').textContent = g.grantId;
    $('usage').replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    showNotices(g, seq);
    try {
      await refreshNow();
      const r = await api('reservationGrants/usage', { grantId: g.grantId });
      if (seq !== state.seq.usage) return;
      $('usage').replaceChildren(...usageView(g, r.items, state.now));
      $('usage-panel').scrollIntoView({ block: 'start' });
    } catch (e) {
      if (seq !== state.seq.usage) return;
      $('usage').replaceChildren();
      showError(e, 'Reading the grant\'s hours');
    }
  }

  // -------------------------------------------------------------- notices

  // The grant's expiry and underuse notices, newest first. A log the key may
  // not read leaves a note here and the hours still show.
  async function showNotices(g, seq) {
    $('notices').replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    let evs;
    try {
      evs = await listEvents({ types: NOTICE_TYPES });
    } catch (e) {
      if (seq !== state.seq.usage) return;
      $('notices').replaceChildren(h('p', { class: 'muted', 'data-testid': 'notices-error' },
        `The notices could not be read: ${e.message} (${e.code}).`));
      return;
    }
    if (seq !== state.seq.usage) return;
    const mine = evs.filter((ev) => ev.data && ev.data.grantId === g.grantId
      && NOTICE_TYPES.includes(ev.type)).reverse();
    $('notices').replaceChildren(mine.length === 0
      ? h('p', { class: 'muted', 'data-testid': 'no-notices' }, 'No notices for this grant.')
      : h('div', { class: 'notices' }, mine.map(noticeCard)));
  }

  function noticeCard(ev) {
    const d = ev.data;
    const expiring = ev.type === 'reservation-grant.expiring';
    const slots = num(d.slots);
    const suggested = num(d.suggestedSlots);
    const field = (name, label, value, attrs) => [h('dt', {}, label),
      h('dd', { 'data-field': name, ...(attrs || {}) }, value)];
    const win = d.window || {};
    return h('div', {
      class: `notice ${expiring ? 'expiring' : 'underused'}`, 'data-testid': 'notice',
      'data-type': ev.type, 'data-event-id': ev.eventId,
    },
    h('p', { class: 'notice-head' },
      h('strong', { 'data-field': 'kind' }, expiring ? 'Expiring' : 'Underused'), ' · ',
      h('span', { 'data-field': 'when' }, fmtTime(ev.occurredAt)),
      h('span', { class: 'muted' }, ` · ${ev.type}`)),
    h('dl', { class: 'totals' },
      expiring ? [
        field('notice', 'Notice', `${d.notice} before its end`),
        field('ends', 'Ends', fmtTime(d.endsAt)),
      ] : field('window', 'Window (last 24 hours)', `${fmtTime(win.from)} to ${fmtTime(win.to)}`),
      field('utilisation', expiring ? 'Utilisation so far' : 'Utilisation in the window',
        fmtPercent(d.utilisation), { title: `held / committed = ${d.utilisation}` }),
      field('suggestion', 'Suggestion', expiring
        ? `renew with ${suggested} of ${slots} slots`
        : `${suggested} of ${slots} slots would hold what ran`),
      expiring ? field('renewal', 'Renewal', d.renewal ? String(d.renewal) : 'none yet') : null));
  }

  // -------------------------------------------------------------- preview

  // Root only: the form on the open reservation, with a term from the next hour for a day.
  function showPreviewForm() {
    state.seq.preview += 1;
    $('preview-result').replaceChildren();
    $('preview-box').hidden = !state.root;
    if (!state.root || $('pv-start').value) return;
    const start = Math.ceil(state.now / HOUR) * HOUR;
    $('pv-start').value = utcInput(start);
    $('pv-end').value = utcInput(start + DAY);
  }

  function previewError(code, message) {
    return h('div', { class: 'preview-error', role: 'alert', 'data-testid': 'preview-error' },
      h('strong', { 'data-field': 'code' }, code), ' ',
      h('span', { 'data-field': 'message' }, message));
  }

  async function submitPreview(ev) {
    ev.preventDefault();
    const v = state.view;
    if (!v || !state.root) return;
    const seq = ++state.seq.preview;
    const out = $('preview-result');
    const grantTenantId = $('pv-tenant').value.trim();
    const projectId = $('pv-project').value.trim();
    const slots = Number($('pv-slots').value);
    const startsAt = utcMillis($('pv-start').value);
    const endsAt = utcMillis($('pv-end').value);
    const missing = grantTenantId === '' ? 'the grantee tenant id'
      : !Number.isInteger(slots) ? 'a whole number of slots'
        : startsAt === null ? 'the start' : endsAt === null ? 'the end' : null;
    if (missing) {
      out.replaceChildren(previewError('FORM', `fill in ${missing}`));
      return;
    }
    const body = {
      accountId: v.accountId, reservationId: v.reservationId, grantTenantId, slots, startsAt,
      endsAt,
    };
    if (projectId !== '') body.projectId = projectId;
    out.replaceChildren(h('p', { class: 'muted' }, 'Asking…'));
    try {
      const r = await api('reservationGrants/preview', body);
      if (seq !== state.seq.preview) return;
      out.replaceChildren(previewAnswer(body, r.preview));
    } catch (e) {
      if (seq !== state.seq.preview) return;
      out.replaceChildren(previewError(e.code, e.message));
    }
  }

  function previewAnswer(asked, p) {
    const field = (name, label, value) => [h('dt', {}, label), h('dd', { 'data-field': name }, value)];
    const verdict = p.fits
      ? `Fits: ${asked.slots} of the ${num(p.available)} slots free over the term`
      : `Does not fit: ${asked.slots} slots asked, ${num(p.available)} free at the busiest ` +
        'point of the term';
    return h('div', {
      class: `preview-answer ${p.fits ? 'fits' : 'no-fit'}`, 'data-testid': 'preview-answer',
      'data-fits': String(p.fits === true),
    },
    h('p', { class: 'verdict', 'data-field': 'fits' }, verdict),
    h('dl', { class: 'totals' },
      field('asked', 'Asked', `${asked.grantTenantId}${asked.projectId ? ` (${asked.projectId})` : ''}` +
        `, ${asked.slots} slots, ${fmtTime(asked.startsAt)} to ${fmtTime(asked.endsAt)}`),
      field('total', 'Reservation total', num(p.total)),
      field('granted', 'Granted at the peak', num(p.granted)),
      field('available', 'Available', num(p.available)),
      field('slotHours', 'Slot-hours billed', p.slotHours),
      field('periods', 'Billed hours', `${fmtTime(p.firstPeriodStart)} to ${fmtTime(p.lastPeriodEnd)}`),
      h('dt', {}, 'Would take in'),
      h('dd', { 'data-field': 'takeIn' }, p.takeIn.length === 0
        ? h('span', { class: 'muted' }, 'no instance (a later start, or it does not fit)')
        : h('ul', { class: 'take-in' }, p.takeIn.map((id) =>
          h('li', { 'data-testid': 'take-in-instance', 'data-instance-id': id }, id))))));
  }

  // Totals and rows are exactly what the API returned; "now" only shades the hours to come.
  function usageView(g, items, now) {
    const sum = (k) => items.reduce((a, i) => a + micros(i[k]), 0n);
    const [slot, held, used] = [sum('slotHours'), sum('heldHours'), sum('usageHours')];
    const credit = sum('deficitHours');
    const lent = sum('lentHours');
    const pct = slot > 0n ? `${(Number((held * 10000n) / slot) / 100).toFixed(2)} %` : '—';
    const totals = h('dl', { class: 'totals', 'data-testid': 'usage-totals' },
      h('dt', {}, 'Grant'), h('dd', {}, `${g.tenantId}, ${g.slots} slots, ${fmtTime(g.startsAt)} ` +
        `to ${fmtTime(g.endsAt)} (${g.state})`),
      h('dt', {}, 'Committed slot-hours'),
      h('dd', { 'data-testid': 'usage-total-slot-hours' }, fmtMicros(slot)),
      h('dt', {}, 'Held instance-hours'), h('dd', { 'data-testid': 'usage-total-held-hours' }, fmtMicros(held)),
      h('dt', {}, 'Running instance-hours'),
      h('dd', { 'data-testid': 'usage-total-usage-hours' }, fmtMicros(used)),
      h('dt', {}, 'Credited slot-hours (not held by the provider)'),
      h('dd', { 'data-testid': 'usage-total-deficit-hours', class: credit > 0n ? 'bad' : null },
        fmtMicros(credit)),
      h('dt', {}, `Lent slot-hours (borrowers in idle slots${g.lending ? ', lending now' : ''})`),
      h('dd', { 'data-testid': 'usage-total-lent-hours' }, fmtMicros(lent)),
      h('dt', {}, 'Utilisation (held / committed)'), h('dd', {}, pct));
    const rows = items.map((i) => h('tr', {
      'data-testid': 'usage-row', class: i.periodStart >= now ? 'future' : null,
    },
    h('td', {}, fmtTime(i.periodStart)), h('td', { class: 'n' }, i.slots),
    h('td', { class: 'n' }, i.slotHours), h('td', { class: 'n' }, i.heldHours),
    h('td', { class: 'n' }, i.usageHours), h('td', { class: 'n' }, i.deficitHours),
    h('td', { class: 'n' }, i.lentHours)));
    const tbl = h('div', { class: 'scroll' }, table(['Hour (UTC)', 'Slots', 'Slot-hours',
      'Held hours', 'Running hours', 'Credited', 'Lent'], rows, { 'data-testid': 'usage-table' }));
    return [totals, usageChart(items, now), tbl];
  }

  // One column per hour: committed slot-hours behind, held and running in front.
  function usageChart(items, now) {
    const W = 1100; const H = 120; const L = 40;
    if (items.length === 0) return h('p', { class: 'muted' }, 'No hours in the term.');
    const top = Math.max(1, ...items.map((i) => Number(micros(i.slotHours)) / 1e6));
    const bw = (W - L - 4) / items.length;
    const yv = (v) => H - (v / top) * (H - 10);
    const cols = items.map((i, n) => {
      const [sh, hh, uh, dh, lh] = ['slotHours', 'heldHours', 'usageHours', 'deficitHours',
        'lentHours'].map((k) => Number(micros(i[k])) / 1e6);
      const x0 = L + n * bw;
      const future = i.periodStart >= now ? ' future' : '';
      return s('g', { class: `hour${future}` },
        s('rect', { x: x0, y: yv(sh), width: Math.max(bw - 0.5, 0.5), height: H - yv(sh), class: 'slot' }),
        s('rect', { x: x0 + bw * 0.2, y: yv(hh), width: Math.max(bw * 0.6, 0.5), height: H - yv(hh), class: 'held' }),
        s('rect', { x: x0 + bw * 0.35, y: yv(uh), width: Math.max(bw * 0.3, 0.5), height: H - yv(uh), class: 'used' }),
        // The credit hangs from the top of the committed bar: the part not held.
        dh > 0 ? s('rect', { x: x0, y: yv(sh), width: Math.max(bw - 0.5, 0.5),
          height: yv(sh - dh) - yv(sh), class: 'credit', 'data-testid': 'usage-credit' }) : null,
        // The lent slot-hours stand on the base beside the grantee's own use.
        lh > 0 ? s('rect', { x: x0 + bw * 0.72, y: yv(lh), width: Math.max(bw * 0.2, 0.5),
          height: H - yv(lh), class: 'lent', 'data-testid': 'usage-lent' }) : null,
        s('title', {}, `${fmtTime(i.periodStart)}: ${i.slotHours} slot-h, ${i.heldHours} held, ` +
          `${i.usageHours} running, ${i.deficitHours} credited, ${i.lentHours} lent`));
    });
    return h('div', { class: 'chart' }, s('svg', {
      viewBox: `0 0 ${W} ${H + 20}`, width: W, height: H + 20, class: 'usage-chart',
      'data-testid': 'usage-chart', role: 'img',
    }, s('text', { x: L - 4, y: yv(top) + 4, class: 'tick end' }, String(top)),
    s('text', { x: L - 4, y: H + 4, class: 'tick end' }, '0'),
    s('line', { x1: L, x2: W, y1: H, y2: H, class: 'axis' }), cols,
    s('text', { x: L, y: H + 16, class: 'tick' }, fmtTime(items[0].periodStart)),
    s('text', { x: W - 4, y: H + 16, class: 'tick end' }, fmtTime(items[items.length - 1].periodEnd))),
    h('p', { class: 'legend' }, h('span', { class: 'key k-slot' }), ' committed slot-hours ',
      h('span', { class: 'key k-held' }), ' held instance-hours ',
      h('span', { class: 'key k-used' }), ' running instance-hours ',
      h('span', { class: 'key k-credit' }), ' credited: committed but not held (per UTC hour) ',
      h('span', { class: 'key k-lent' }), ' lent: slot-hours borrowers ran in idle slots'));
  }

  // ---------------------------------------------------------------- start

  document.addEventListener('DOMContentLoaded', () => {
    $('key-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const key = $('key').value.trim();
      const tenant = $('tenant').value.trim() || 'root';
      if (!/^[A-Za-z0-9._:-]{1,128}$/.test(tenant)) {
        showError(new Error('the tenant id may hold letters, digits and . _ : - only'), 'Signing in');
        return;
      }
      if (key === '') {
        showError(new Error('paste an API key first'), 'Signing in');
        return;
      }
      signIn(key, tenant);
    });
    $('forget').addEventListener('click', () => { forget(); clearError(); });
    $('tl-earlier').addEventListener('click', () => shift(-7));
    $('tl-later').addEventListener('click', () => shift(7));
    $('preview-form').addEventListener('submit', submitPreview);
    $('tl-now').addEventListener('click', () => {
      if (state.view) openTimeline(state.view.accountId, state.view.reservationId);
    });
    const saved = sessionStorage.getItem(KEY);
    if (saved) {
      $('tenant').value = sessionStorage.getItem(TENANT) || 'root';
      signIn(saved, $('tenant').value);
    }
  });
})();
