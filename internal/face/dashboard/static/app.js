// The PCP dashboard's pages: each reads its lists from /api/..., then
// keeps them live from the Server-Sent Events of /stream. Text from pcpd
// (labels, descriptions, app ids) is untrusted: it is only ever set as
// textContent or an attribute value, never parsed as markup.
'use strict';
(function () {
  const page = document.querySelector('meta[name="pcp-page"]').content;
  const csrf = document.querySelector('meta[name="pcp-csrf"]').content;
  const content = document.getElementById('content');
  const live = document.getElementById('live');
  const toast = document.getElementById('toast');
  // skew is the server's clock minus the browser's, in ms.
  let skew = 0;

  // nowMS is the high-resolution wall clock, for the latency marks.
  function nowMS() { return performance.timeOrigin + performance.now(); }

  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of kids.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function say(msg, bad) {
    toast.textContent = msg;
    toast.className = bad ? 'show bad' : 'show';
    clearTimeout(say.t);
    say.t = setTimeout(() => { toast.className = ''; }, 5000);
  }

  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: 'application/json' }, credentials: 'same-origin' });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = body.error || {};
      throw new Error((e.code ? e.code + ': ' : '') + (e.message || r.statusText));
    }
    return body;
  }

  function syncClock(serverNow) {
    const t = Date.parse(serverNow);
    if (!isNaN(t)) skew = t - Date.now();
  }

  // A form of the page: a real form post (it works without script too),
  // sent by fetch so the page stays.
  function actionForm(action, fields, label, cls) {
    const f = h('form', { method: 'post', action: '/action/' + action, class: 'inline', 'data-action': action });
    f.append(h('input', { type: 'hidden', name: 'csrf', value: csrf }), h('input', { type: 'hidden', name: 'page', value: page }));
    for (const [k, v] of Object.entries(fields)) f.append(h('input', { type: 'hidden', name: k, value: v }));
    f.append(h('button', { type: 'submit', class: cls || '' }, label));
    return f;
  }

  document.addEventListener('submit', async (ev) => {
    const f = ev.target;
    if (!f.dataset.action) return;
    ev.preventDefault();
    const btn = f.querySelector('button');
    if (btn) btn.disabled = true;
    try {
      const r = await fetch(f.action, {
        method: 'POST', credentials: 'same-origin',
        headers: { Accept: 'application/json', 'Content-Type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(new FormData(f)),
      });
      const body = await r.json().catch(() => ({}));
      if (!r.ok) {
        const e = body.error || {};
        say((e.code ? e.code + ': ' : '') + (e.message || r.statusText), true);
      } else {
        say(doneText[f.dataset.action] || 'Done');
        if (pages[page].after) pages[page].after(f.dataset.action, body.result);
      }
    } catch (e) {
      say(String(e), true);
    } finally {
      if (btn) btn.disabled = false;
    }
  });
  const doneText = { approve: 'Approved', deny: 'Denied', undo: 'Undone', revoke: 'Revoked', allow: 'Allowed' };

  function fmtTime(iso) {
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleTimeString();
  }
  function fmtLeft(ms) {
    if (ms <= 0) return '0:00';
    const s = Math.ceil(ms / 1000);
    return Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0');
  }
  // One timer moves every countdown on the page; it reads the clock, it
  // asks pcpd nothing.
  setInterval(() => {
    const now = Date.now() + skew;
    for (const e of document.querySelectorAll('[data-deadline]')) {
      const left = Date.parse(e.dataset.deadline) - now;
      e.textContent = (e.dataset.prefix || '') + fmtLeft(left);
      e.classList.toggle('soon', left < 10000);
    }
  }, 250);
  function countdown(deadline, prefix) {
    const left = Date.parse(deadline) - (Date.now() + skew);
    return h('span', { class: 'countdown', 'data-deadline': deadline, 'data-prefix': prefix }, prefix + fmtLeft(left));
  }

  function agentOf(requester) {
    return requester || '';
  }

  // The tab's title counts the pending confirmations, so that a
  // dashboard in a background tab still says when one waits.
  const baseTitle = document.title;
  function badge(name, n) {
    const b = document.querySelector('[data-badge="' + name + '"]');
    if (b) b.textContent = n > 0 ? String(n) : '';
    if (name === 'confirmations') document.title = (n > 0 ? '(' + n + ') ' : '') + baseTitle;
  }

  function markRendered() {
    if (!markRendered.done) {
      markRendered.done = true;
      performance.mark('pcp-rendered');
      document.body.dataset.renderedMs = String(performance.now());
    }
  }

  // ---- confirmations

  const confirmations = {
    byID: new Map(),
    async load() {
      const v = await getJSON('/api/confirmations');
      syncClock(v.now);
      this.byID.clear();
      for (const c of v.confirmations) this.byID.set(c.confirmation_id, c);
      this.render();
    },
    event(ev) {
      if (ev.type.startsWith('confirmation.')) {
        this.byID.set(ev.data.confirmation_id, ev.data);
        this.render(ev.data.confirmation_id);
      }
    },
    render(changed) {
      const all = [...this.byID.values()].sort((a, b) => b.created_at.localeCompare(a.created_at));
      const pending = all.filter((c) => c.state === 'pending');
      const rest = all.filter((c) => c.state !== 'pending');
      badge('confirmations', pending.length);
      const list = h('div', { class: 'cards', id: 'pending' });
      if (!pending.length) list.append(h('p', { class: 'empty' }, 'Nothing waits for your decision.'));
      for (const c of pending) {
        list.append(h('article', { class: 'card pending', 'data-id': c.confirmation_id, 'data-seen-ms': changed === c.confirmation_id ? String(nowMS()) : null },
          h('div', { class: 'card-head' },
            h('code', { class: 'cap' }, c.capability_id),
            countdown(c.expires_at, 'expires in ')),
          h('p', { class: 'desc' }, c.description || '(no description)'),
          h('dl', { class: 'facts' },
            h('dt', {}, 'App'), h('dd', {}, c.app_id),
            h('dt', {}, 'Agent'), h('dd', {}, agentOf(c.requester)),
            h('dt', {}, 'Kind'), h('dd', {}, c.confirmation_type + (c.undo_window_ms ? ', undo window ' + Math.round(c.undo_window_ms / 1000) + ' s' : '')),
            h('dt', {}, 'Asked'), h('dd', {}, fmtTime(c.created_at)),
            h('dt', {}, 'Id'), h('dd', {}, h('code', {}, c.confirmation_id))),
          h('div', { class: 'buttons' },
            actionForm('approve', { confirmation_id: c.confirmation_id }, 'Approve', 'approve'),
            actionForm('deny', { confirmation_id: c.confirmation_id }, 'Deny', 'deny'))));
      }
      const table = h('table', { class: 'grid', id: 'decided' },
        h('thead', {}, h('tr', {}, h('th', {}, 'State'), h('th', {}, 'Capability'), h('th', {}, 'Description'), h('th', {}, 'Agent'), h('th', {}, 'Asked'), h('th', {}, 'Reason'))),
        h('tbody', {}, rest.map((c) => h('tr', { 'data-id': c.confirmation_id, 'data-state': c.state },
          h('td', {}, h('span', { class: 'state ' + c.state }, c.state)), h('td', {}, h('code', {}, c.capability_id)),
          h('td', {}, c.description), h('td', {}, agentOf(c.requester)), h('td', {}, fmtTime(c.created_at)), h('td', {}, c.reason || '')))));
      content.replaceChildren(h('h2', {}, 'Waiting for you'), list,
        h('h2', {}, 'Decided'), rest.length ? table : h('p', { class: 'empty' }, 'None yet.'));
    },
  };

  // ---- jobs

  const jobs = {
    byID: new Map(),
    async load() {
      const v = await getJSON('/api/jobs');
      syncClock(v.now);
      this.byID.clear();
      for (const j of v.jobs) this.byID.set(j.job_id, j);
      this.render();
    },
    event(ev) {
      if (ev.type.startsWith('job.')) {
        this.byID.set(ev.data.job_id, ev.data);
        this.render(ev.data.job_id);
      }
    },
    render(changed) {
      const all = [...this.byID.values()].sort((a, b) => b.created_at.localeCompare(a.created_at));
      const queued = all.filter((j) => j.state === 'queued');
      badge('jobs', queued.length);
      const rows = all.map((j) => h('tr', { 'data-id': j.job_id, 'data-state': j.state, 'data-seen-ms': changed === j.job_id ? String(nowMS()) : null },
        h('td', {}, h('span', { class: 'state ' + j.state }, j.state)),
        h('td', {}, h('code', {}, j.capability_id)),
        h('td', {}, agentOf(j.requester)),
        h('td', {}, j.state === 'queued' ? countdown(j.run_at, 'runs in ') : fmtTime(j.updated_at)),
        h('td', { class: 'result' }, j.error ? JSON.stringify(j.error) : j.result ? JSON.stringify(j.result) : (j.reason || '')),
        h('td', {}, j.state === 'queued' ? actionForm('undo', { job_id: j.job_id }, 'Undo', 'deny') : '')));
      content.replaceChildren(
        h('p', { class: 'muted' }, 'An approved action with an undo window waits here before it runs; Undo cancels it.'),
        all.length ? h('table', { class: 'grid', id: 'jobs' },
          h('thead', {}, h('tr', {}, h('th', {}, 'State'), h('th', {}, 'Capability'), h('th', {}, 'Agent'), h('th', {}, 'When'), h('th', {}, 'Outcome'), h('th', {}, ''))),
          h('tbody', {}, rows)) : h('p', { class: 'empty' }, 'No deferred jobs.'));
    },
  };

  // ---- events

  const events = {
    list: [],
    types: [],
    filter: { app: '', agent: '', type: '' },
    async load() {
      const v = await getJSON('/api/events');
      this.types = v.types;
      this.list = v.events.slice().reverse();
      this.build();
      this.render();
    },
    event(ev) {
      if (this.list.length && this.list[0].sequence >= ev.sequence) return;
      this.list.unshift(ev);
      if (this.list.length > 500) this.list.length = 500;
      if (this.matches(ev)) {
        const row = this.row(ev);
        row.dataset.seenMs = String(nowMS());
        this.tbody.prepend(row);
        while (this.tbody.children.length > 500) this.tbody.lastChild.remove();
        this.empty.hidden = true;
      }
      this.refreshApps();
    },
    agentText(ev) {
      const d = ev.data || {};
      return d.requester || d.actor || d.agent || d.source || '';
    },
    matches(ev) {
      const f = this.filter;
      if (f.type && ev.type !== f.type) return false;
      if (f.app && ev.app_id !== f.app) return false;
      if (f.agent && !this.agentText(ev).includes(f.agent)) return false;
      return true;
    },
    // summary is the event in a line: what the type says first, then
    // the rest of its members.
    summary(ev) {
      const d = ev.data || {};
      const kind = ev.type.split('.')[0];
      if (kind === 'confirmation') return (d.description || d.capability_id) + (d.reason ? ' — ' + d.reason : '');
      if (kind === 'job') return d.capability_id + ' → ' + d.state + (d.reason ? ' — ' + d.reason : '');
      if (ev.type === 'capability.invoked') return d.capability_id + ' → ' + d.outcome + ' (' + d.duration_ms + ' ms)';
      return Object.entries(d).filter(([k]) => k !== 'app_id').map(([k, v]) => k + '=' + (typeof v === 'string' ? v : JSON.stringify(v))).join('  ');
    },
    row(ev) {
      const d = ev.data || {};
      const full = JSON.stringify(d, null, 1);
      const line = this.summary(ev);
      const summary = line.length > 140 ? line.slice(0, 139) + '…' : line;
      return h('tr', { 'data-seq': String(ev.sequence), 'data-type': ev.type },
        h('td', { class: 'num' }, String(ev.sequence)),
        h('td', {}, new Date(ev.timestamp * 1000).toLocaleTimeString()),
        h('td', {}, h('span', { class: 'etype ' + ev.type.split('.')[0] }, ev.type)),
        h('td', {}, ev.app_id || ''),
        h('td', {}, this.agentText(ev)),
        h('td', { class: 'summary', title: full }, summary));
    },
    refreshApps() {
      const apps = new Set(this.list.map((e) => e.app_id).filter(Boolean));
      const have = new Set([...this.appSel.options].map((o) => o.value));
      for (const a of [...apps].sort()) if (!have.has(a)) this.appSel.append(h('option', { value: a }, a));
    },
    build() {
      this.appSel = h('select', { id: 'f-app', name: 'app' }, h('option', { value: '' }, 'every app'));
      this.typeSel = h('select', { id: 'f-type', name: 'type' }, h('option', { value: '' }, 'every type'), this.types.map((t) => h('option', { value: t }, t)));
      this.agentIn = h('input', { id: 'f-agent', name: 'agent', type: 'search', placeholder: 'agent, e.g. agent:ci' });
      const onChange = () => {
        this.filter = { app: this.appSel.value, type: this.typeSel.value, agent: this.agentIn.value.trim() };
        this.render();
      };
      for (const e of [this.appSel, this.typeSel]) e.addEventListener('change', onChange);
      this.agentIn.addEventListener('input', onChange);
      this.tbody = h('tbody', {});
      this.empty = h('p', { class: 'empty' }, 'No event matches.');
      content.replaceChildren(
        h('div', { class: 'filters' }, h('label', {}, 'App ', this.appSel), h('label', {}, 'Agent ', this.agentIn), h('label', {}, 'Type ', this.typeSel)),
        h('table', { class: 'grid events', id: 'events' },
          h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'Time'), h('th', {}, 'Type'), h('th', {}, 'App'), h('th', {}, 'Agent'), h('th', {}, 'What'))),
          this.tbody),
        this.empty);
      this.refreshApps();
    },
    render() {
      const rows = this.list.filter((e) => this.matches(e)).map((e) => this.row(e));
      this.tbody.replaceChildren(...rows);
      this.empty.hidden = rows.length > 0;
    },
  };

  // ---- audit

  const audit = {
    async load() {
      const v = await getJSON('/api/audit');
      this.render(v);
    },
    event() {
      // A new action is audited as it is answered: read the tail again,
      // once the burst is over.
      clearTimeout(this.t);
      this.t = setTimeout(() => this.load().catch((e) => say(String(e), true)), 300);
    },
    render(v) {
      const ver = v.verify;
      const broken = !ver.ok;
      const status = h('section', { class: 'chain ' + (broken ? 'broken' : 'ok'), id: 'chain' },
        broken
          ? [h('strong', {}, 'Chain broken at entry #' + ver.broken_seq), h('p', {}, ver.problem || '')]
          : [h('strong', {}, 'Chain intact'), h('p', {}, ver.entries + ' entries, head ' + (ver.head || '').slice(0, 16) + '…')]);
      const parts = [status];
      if (v.broken) {
        parts.push(h('h2', {}, 'First broken entry'), h('pre', { class: 'entry', id: 'broken-entry' }, JSON.stringify(v.broken, null, 2)));
      }
      const rows = v.entries.slice().reverse().map((e) => h('tr', { 'data-seq': String(e.seq), class: broken && e.seq === ver.broken_seq ? 'broken' : '' },
        h('td', { class: 'num' }, String(e.seq)),
        h('td', {}, fmtTime(e.time)),
        h('td', {}, e.kind),
        h('td', {}, e.actor || ''),
        h('td', {}, h('code', {}, e.capability_id || e.app_id || '')),
        h('td', {}, h('span', { class: 'state ' + (/^[A-Z_]+$/.test(e.outcome) ? 'code' : e.outcome) }, e.outcome)),
        h('td', { class: 'hash', title: e.hash }, e.hash.slice(0, 12))));
      parts.push(h('h2', {}, 'Newest entries'),
        h('table', { class: 'grid', id: 'audit' },
          h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'Time'), h('th', {}, 'Kind'), h('th', {}, 'Actor'), h('th', {}, 'Capability / app'), h('th', {}, 'Outcome'), h('th', {}, 'Hash'))),
          h('tbody', {}, rows)));
      content.replaceChildren(...parts);
    },
  };

  // ---- apps

  const apps = {
    async load() {
      this.render(await getJSON('/api/apps'));
    },
    event(ev) {
      if (ev.type.startsWith('app.') || ev.type.startsWith('capability.registered') || ev.type.startsWith('capability.unregistered')) {
        clearTimeout(this.t);
        this.t = setTimeout(() => this.load().catch((e) => say(String(e), true)), 100);
      }
    },
    after() { this.load().catch((e) => say(String(e), true)); },
    render(v) {
      const pol = new Map(v.policy.map((p) => [p.capability_id, p]));
      const appRows = v.apps.map((a) => h('tr', { 'data-app': a.app_id, 'data-state': a.state },
        h('td', {}, h('code', {}, a.app_id)),
        h('td', {}, h('span', { class: 'state ' + a.state }, a.state)),
        h('td', { class: 'num' }, String(a.capabilities)),
        h('td', {}, a.publisher || ''),
        h('td', {}, a.signed ? 'signed' : 'unsigned'),
        h('td', {}, a.state === 'revoked' ? [actionForm('allow', { app_id: a.app_id }, 'Allow', 'approve'), ' ', h('span', { class: 'muted' }, a.reason || '')]
          : a.state === 'builtin' ? '' : actionForm('revoke', { app_id: a.app_id }, 'Revoke', 'deny'))));
      const capRows = v.capabilities.map((c) => {
        const p = pol.get(c.id);
        const tl = p ? p.trust_level : { value: c.trust_level, from: 'manifest' };
        const to = p ? p.timeout : null;
        return h('tr', { 'data-cap': c.id },
          h('td', {}, h('code', {}, c.id), c.description ? h('div', { class: 'muted small' }, c.description) : ''),
          h('td', { class: 'num' }, String(c.tier)),
          h('td', {}, p ? p.declared : c.trust_level),
          h('td', {}, h('span', { class: 'trust ' + tl.value }, String(tl.value)), h('div', { class: 'muted small' }, tl.from)),
          h('td', {}, to ? [String(to.value), h('div', { class: 'muted small' }, to.from)] : ''),
          h('td', {}, c.available ? 'yes' : 'no'));
      });
      content.replaceChildren(
        h('h2', {}, 'Apps'),
        h('table', { class: 'grid', id: 'apps' },
          h('thead', {}, h('tr', {}, h('th', {}, 'App'), h('th', {}, 'State'), h('th', {}, 'Capabilities'), h('th', {}, 'Publisher'), h('th', {}, 'Manifest'), h('th', {}, ''))),
          h('tbody', {}, appRows)),
        h('h2', {}, 'Capabilities and the trust levels in force'),
        h('p', { class: 'muted' }, 'Policy: ' + v.policy_path + (v.policy_loaded ? '' : ' (not present: built-in defaults)') + '. Tier 3 fallback: ' + v.tier3.value + ' (' + v.tier3.from + ').'),
        h('table', { class: 'grid', id: 'caps' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Capability'), h('th', {}, 'Tier'), h('th', {}, 'Declared'), h('th', {}, 'In force'), h('th', {}, 'Timeout'), h('th', {}, 'Available'))),
          h('tbody', {}, capRows)));
    },
  };

  // ---- surfaces

  const surfaces = {
    selected: '',
    async load() {
      const v = await getJSON('/api/surfaces');
      this.v = v;
      if (!this.selected && v.surfaces.length) this.selected = (v.surfaces.find((s) => s.surface_id === v.focused) || v.surfaces[0]).surface_id;
      this.render();
    },
    event(ev) {
      if (ev.type === 'surface.created' || ev.type === 'surface.destroyed' || ev.type === 'surface.title_changed') {
        clearTimeout(this.t);
        this.t = setTimeout(() => this.load().catch((e) => say(String(e), true)), 200);
      }
    },
    render() {
      const v = this.v;
      const list = h('ul', { class: 'surfaces', id: 'surface-list' }, v.surfaces.map((s) => {
        const b = h('button', { type: 'button', class: s.surface_id === this.selected ? 'sel' : '', 'data-surface': s.surface_id },
          h('strong', {}, s.title || '(untitled)'), h('span', { class: 'muted small' }, (s.app_id || '?') + ' · tier ' + s.tier + ' · ' + s.surface_id));
        b.addEventListener('click', () => { this.selected = s.surface_id; this.render(); });
        return h('li', {}, b);
      }));
      const pane = h('div', { class: 'surface-pane' });
      const side = h('div', { class: 'surface-side' }, list, v.problems ? h('p', { class: 'muted small' }, v.problems.join('; ')) : '');
      content.replaceChildren(v.surfaces.length ? h('div', { class: 'split' }, side, pane) : h('p', { class: 'empty' }, 'No surface: no adapter reports a window.'));
      if (this.selected) this.show(pane, this.selected);
    },
    async show(pane, id) {
      const wf = h('div', { class: 'wireframe', id: 'wireframe' }, h('p', { class: 'muted' }, 'Reading the element tree…'));
      const shotBox = h('div', { class: 'screenshot', id: 'screenshot' });
      const parts = [h('h2', {}, 'Element tree'), wf];
      if (this.v.capture) {
        const btn = h('button', { type: 'button', id: 'take-shot' }, 'Take a screenshot');
        btn.addEventListener('click', () => this.shoot(shotBox, id));
        parts.push(h('h2', {}, 'Screenshot ', btn), shotBox);
      } else {
        parts.push(h('p', { class: 'muted' }, 'Screenshots need the X11 platform adapter (pcpd --x11).'));
      }
      pane.replaceChildren(...parts);
      try {
        const r = await fetch('/api/surface/wireframe.svg?id=' + encodeURIComponent(id), { credentials: 'same-origin' });
        if (!r.ok) throw new Error(((await r.json().catch(() => ({}))).error || {}).message || r.statusText);
        const doc = new DOMParser().parseFromString(await r.text(), 'image/svg+xml');
        const svg = doc.documentElement;
        if (svg.nodeName !== 'svg') throw new Error('not an SVG picture');
        for (const s of svg.querySelectorAll('script, foreignObject')) s.remove();
        wf.replaceChildren(document.importNode(svg, true));
      } catch (e) {
        wf.replaceChildren(h('p', { class: 'bad' }, 'No element tree: ' + e.message));
      }
    },
    async shoot(box, id) {
      box.replaceChildren(h('p', { class: 'muted' }, 'Capturing…'));
      try {
        const v = await getJSON('/api/surface/screenshot?id=' + encodeURIComponent(id));
        const NS = 'http://www.w3.org/2000/svg';
        const svg = document.createElementNS(NS, 'svg');
        // The screen's capture, cut to the surface's rectangle.
        const c = v.crop || { x: 0, y: 0, w: v.width, h: v.height };
        svg.setAttribute('viewBox', c.x + ' ' + c.y + ' ' + c.w + ' ' + c.h);
        svg.setAttribute('width', String(c.w));
        svg.setAttribute('class', 'shot');
        const img = document.createElementNS(NS, 'image');
        img.setAttribute('href', v.image);
        img.setAttribute('width', String(v.width));
        img.setAttribute('height', String(v.height));
        svg.append(img);
        for (const b of v.boxes) {
          const g = document.createElementNS(NS, 'g');
          const t = document.createElementNS(NS, 'title');
          t.textContent = b.role + (b.label ? ' ' + b.label : '') + '\n' + b.id;
          const r = document.createElementNS(NS, 'rect');
          for (const [k, val] of [['x', b.x], ['y', b.y], ['width', b.w], ['height', b.h]]) r.setAttribute(k, String(val));
          r.setAttribute('class', 'elbox');
          g.append(t, r);
          svg.append(g);
        }
        box.replaceChildren(svg, h('p', { class: 'muted small' }, v.boxes.length + ' elements outlined; hover for each one’s role and label.'));
      } catch (e) {
        box.replaceChildren(h('p', { class: 'bad' }, 'No screenshot: ' + e.message));
      }
    },
  };

  const pages = { confirmations, jobs, events, audit, apps, surfaces };
  const current = pages[page];

  // Live updates. The stream says "ready" when it holds every event from
  // then on; the page's lists are (re)read after that, so nothing falls
  // between the read and the stream.
  // The navigation's badges: pending confirmations and queued jobs, kept
  // by the page that does not show them itself.
  let counts = null;
  function countsEvent(ev) {
    if (!counts) return;
    if (ev.type.startsWith('confirmation.') && page !== 'confirmations') {
      counts.conf.set(ev.data.confirmation_id, ev.data.state);
      badge('confirmations', [...counts.conf.values()].filter((s) => s === 'pending').length);
    } else if (ev.type.startsWith('job.') && page !== 'jobs') {
      counts.jobs.set(ev.data.job_id, ev.data.state);
      badge('jobs', [...counts.jobs.values()].filter((s) => s === 'queued').length);
    }
  }
  async function loadCounts() {
    const c = { conf: new Map(), jobs: new Map() };
    if (page !== 'confirmations') {
      for (const x of (await getJSON('/api/confirmations')).confirmations) c.conf.set(x.confirmation_id, x.state);
      badge('confirmations', [...c.conf.values()].filter((s) => s === 'pending').length);
    }
    if (page !== 'jobs') {
      for (const x of (await getJSON('/api/jobs')).jobs) c.jobs.set(x.job_id, x.state);
      badge('jobs', [...c.jobs.values()].filter((s) => s === 'queued').length);
    }
    counts = c;
  }

  const es = new EventSource('/stream');
  let first = true;
  es.addEventListener('ready', () => {
    live.textContent = 'live';
    live.className = 'live on';
    const load = current.load();
    load.then(markRendered, (e) => content.replaceChildren(h('p', { class: 'bad' }, 'Could not read: ' + e.message)));
    if (first) load.finally(() => loadCounts().catch(() => {}));
    first = false;
  });
  es.addEventListener('lost', () => {
    current.load().catch(() => {});
  });
  es.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    current.event(ev);
    countsEvent(ev);
  };
  es.onerror = () => {
    live.textContent = 'reconnecting…';
    live.className = 'live off';
  };
})();
