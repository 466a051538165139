/* report.html's interactive section (loadgen/report/interactive.py writes the markup and the data).
 *
 * The verdict and goodput are recomputed from the embedded per-request columns with loadgen's own
 * definitions (loadgen/analysis/sla.py good_mask and evaluate, analysis/metrics.py goodput): a request
 * is good when it is ok and within every SLO set (no TPOT, fewer than 2 tokens, passes that SLO; no
 * TTFT or E2E fails it); goodput is good requests per second of the measured window; the attained
 * fraction is over ok + failed, so failures count against it; the verdict is the run's
 * error_rate <= max_error_rate and, for each SLO set, its chosen percentile <= the SLO, percentiles
 * as numpy.percentile(method="linear") over the ok requests. A down-sampled run weighs each sampled
 * row by the requests it stands for, so its figures are estimates (the page says so).
 *
 * Results are also written as data-* attributes (full precision) so a headless browser can read
 * them; the URL hash (#slo.ttft_ms=200&pct=p90&load=12) sets the inputs at load and follows them
 * (and slowest=N presses the timeline's "slowest" button N times at load).
 */
(function () {
  'use strict';
  var $ = function (id) { return document.getElementById(id); };
  var D = JSON.parse($('lg-data').textContent);
  var C = D.cols, N = C.id.length, R = D.run, S = D.sample;
  var W = new Float64Array(N).fill(S.sampled ? S.weight : 1);
  S.slowest_rows.forEach(function (i) { W[i] = 1; });  // kept apart from the uniform sample
  var COL = { ok: '#2e7d32', over: '#d62728', none: '#1f77b4', wait: '#a0a0a0', fail: '#111111',
    slo: '#ff7f0e', pct: '#9467bd', mark: '#ff7f0e' };
  var plots = [];

  function fmt(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    return v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function esc(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  }

  function readInputs() {
    var slos = {};
    D.slos.forEach(function (s) {
      var v = $('lg-slo-' + s.name).value.trim();
      if (v !== '' && isFinite(+v)) slos[s.name] = +v;
    });
    return { slos: slos, pct: $('lg-pct').value };
  }

  // numpy.percentile(method="linear") to the bit: virtual index (n - 1) * q, numpy's _lerp.
  function percentileLinear(sorted, p) {
    var n = sorted.length;
    if (!n) return null;
    var h = (n - 1) * (p / 100), lo = Math.floor(h), hi = Math.min(lo + 1, n - 1), t = h - lo;
    var a = sorted[lo], b = sorted[hi], d = b - a;
    return t >= 0.5 ? b - d * (1 - t) : a + d * t;
  }

  // A sampled run: the smallest value whose cumulative weight reaches p % of the total.
  function percentileWeighted(pairs, p) {
    if (!pairs.length) return null;
    var total = 0, i;
    for (i = 0; i < pairs.length; i++) total += pairs[i][1];
    var target = total * p / 100, cum = 0;
    for (i = 0; i < pairs.length; i++) { cum += pairs[i][1]; if (cum >= target) return pairs[i][0]; }
    return pairs[pairs.length - 1][0];
  }

  // The sorted values of an SLO's metric over the rows its distribution covers (ok requests).
  var sortedCache = {};
  function sortedValues(slo) {
    if (sortedCache[slo.name]) return sortedCache[slo.name];
    var pairs = [], col = C[slo.name];
    for (var i = 0; i < N; i++) {
      if (col[i] === null) continue;
      if (slo.rows === 'ok_requests' && C.status[i] !== 0) continue;
      pairs.push([col[i], W[i]]);
    }
    pairs.sort(function (x, y) { return x[0] - y[0]; });
    sortedCache[slo.name] = pairs;
    return pairs;
  }

  function percentile(slo, p) {
    var pairs = sortedValues(slo);
    if (S.sampled) return percentileWeighted(pairs, p);
    return percentileLinear(pairs.map(function (x) { return x[0]; }), p);
  }

  function isGood(i, slos) {
    if (C.status[i] !== 0) return false;
    for (var k = 0; k < D.slos.length; k++) {
      var s = D.slos[k];
      if (!(s.name in slos)) continue;
      var v = C[s.name][i];
      if (v === null ? !s.nan_passes : !(v <= slos[s.name])) return false;
    }
    return true;
  }

  function compute(inp) {
    var good = 0, tokens = 0;
    for (var i = 0; i < N; i++) {
      if (!isGood(i, inp.slos)) continue;
      good += W[i];
      tokens += W[i] * (C.output[i] || 0);
    }
    var secs = R.seconds, judged = R.ok + R.failed;
    var rate = R.error_rate;
    var details = [{ rule: 'error_rate <= ' + R.max_error_rate, value: rate,
      passed: rate !== null && rate <= R.max_error_rate, reason: rate === null ? 'no request finished' : null }];
    var p = D.percentiles[inp.pct];
    D.slos.forEach(function (s) {
      if (!(s.name in inp.slos)) return;
      var v = percentile(s, p);
      details.push({ rule: inp.pct.replace('_', '.') + ' ' + s.name + ' <= ' + inp.slos[s.name], value: v,
        passed: v !== null && v <= inp.slos[s.name], reason: v === null ? 'no data' : null, slo: s.name });
    });
    var verdict;
    if (details.length === 1) verdict = 'none';  // no SLO set: analysis/sla.py evaluate has no rule
    else if (R.all_warmup) verdict = 'none';
    else if (R.incomplete) verdict = 'incomplete';
    else verdict = details.every(function (d) { return d.passed; }) ? 'pass' : 'fail';
    return { verdict: verdict, details: details.length === 1 ? [] : details,
      goodput: secs > 0 ? good / secs : null, tokens: secs > 0 ? tokens / secs : null,
      attained: judged ? good / judged : null };
  }

  function setOut(id, value, text) {
    var el = $(id);
    el.dataset.value = value === null ? '' : String(value);
    el.textContent = text;
  }

  function render() {
    var inp = readInputs(), r = compute(inp);
    var v = $('lg-verdict');
    v.dataset.verdict = r.verdict;
    v.textContent = r.verdict.toUpperCase() + (S.sampled ? ' (estimated)' : '');
    v.className = 'lg-verdict lg-' + r.verdict;
    setOut('lg-goodput', r.goodput, fmt(r.goodput, 2));
    setOut('lg-goodput-tokens', r.tokens, fmt(r.tokens, 1));
    setOut('lg-attained', r.attained, r.attained === null ? '-' : (100 * r.attained).toFixed(1) + ' %');
    var rows = ['<tr><th>rule</th><th class="r">measured</th><th>result</th></tr>'];
    r.details.forEach(function (d) {
      rows.push('<tr data-rule="' + esc(d.rule) + '" data-value="' + (d.value === null ? '' : d.value) +
        '" data-passed="' + d.passed + '"><td>' + esc(d.rule) + '</td><td class="r">' +
        (d.value === null ? 'no data' : fmt(d.value, 4)) + '</td><td>' +
        (d.passed ? 'pass' : 'FAIL' + (d.reason ? ' (' + d.reason + ')' : '')) + '</td></tr>');
    });
    $('lg-rules').innerHTML = r.details.length ? rows.join('') :
      '<tr><td>no per-request SLO set: goodput equals request throughput, no verdict</td></tr>';
    state.inp = inp;
    plots.forEach(function (u) { u.redraw(false); });
  }

  // ---- the URL hash: the inputs at load, kept as they change ----
  var state = { inp: null, load: null, slowest: 0 };
  function readHash() {
    var h = location.hash.replace(/^#/, '');
    try { h = decodeURIComponent(h); } catch (e) { return; }  // a malformed hash: the run's own inputs
    if (h.indexOf('=') < 0) return;
    h.split('&').forEach(function (kv) {
      var i = kv.indexOf('='), k = kv.slice(0, i), v = kv.slice(i + 1);
      if (k.indexOf('slo.') === 0 && $('lg-slo-' + k.slice(4))) $('lg-slo-' + k.slice(4)).value = v;
      else if (k === 'pct' && v in D.percentiles) $('lg-pct').value = v;
      else if (k === 'load' && $('lg-load') && isFinite(+v) && v !== '') state.load = +v;
      else if (k === 'slowest' && /^[0-9]+$/.test(v)) state.slowest = +v;  // press "slowest" v times
    });
  }
  function writeHash() {
    var parts = D.slos.map(function (s) { return 'slo.' + s.name + '=' + $('lg-slo-' + s.name).value.trim(); });
    parts.push('pct=' + $('lg-pct').value);
    if (state.load !== null) parts.push('load=' + state.load);
    try { history.replaceState(null, '', '#' + parts.join('&')); } catch (e) { /* file:// may refuse */ }
  }

  // ---- plots: uPlot, a live legend gives every plot its hover values ----
  // A plot's width: ``perRow`` side by side in ``box`` (the section's width when box has none yet).
  function width(box, perRow) {
    var w = box.clientWidth || $('lg-interactive').clientWidth || 1100;
    return Math.max(300, Math.min(Math.floor((w - 12 * (perRow - 1)) / perRow) - 4, 560));
  }

  function vline(u, x, color) {
    if (x === null || x === undefined || x < u.scales.x.min || x > u.scales.x.max) return;
    var ctx = u.ctx, px = u.valToPos(x, 'x', true);
    ctx.save(); ctx.strokeStyle = color; ctx.setLineDash([6, 4]); ctx.lineWidth = 1.5 * devicePixelRatio;
    ctx.beginPath(); ctx.moveTo(px, u.bbox.top); ctx.lineTo(px, u.bbox.top + u.bbox.height); ctx.stroke();
    ctx.restore();
  }

  function cdfPlots() {
    var box = $('lg-cdfs');
    D.slos.forEach(function (s) {
      var pairs = sortedValues(s), xs = [], ys = [], total = 0, cum = 0, i;
      for (i = 0; i < pairs.length; i++) total += pairs[i][1];
      var step = Math.max(1, Math.floor(pairs.length / 4000));  // a curve of at most ~4,000 points
      for (i = 0; i < pairs.length; i++) {
        cum += pairs[i][1];
        if (i % step === 0 || i === pairs.length - 1) { xs.push(pairs[i][0]); ys.push(cum / total); }
      }
      var el = document.createElement('div');
      box.appendChild(el);
      if (!xs.length) { el.textContent = s.label + ': no data'; return; }
      plots.push(new uPlot({
        title: s.label + ' of ok requests: share at or below', width: width(box, D.slos.length), height: 220,
        scales: { x: { time: false } },
        series: [{ label: s.label + ' (ms)', value: function (u, v) { return fmt(v, 2); } },
          { label: 'share', stroke: COL.none, width: 1.5, value: function (u, v) { return v === null ? '-' : (100 * v).toFixed(2) + ' %'; } }],
        axes: [{ label: 'ms' }, { values: function (u, t) { return t.map(function (v) { return (100 * v).toFixed(0) + '%'; }); } }],
        hooks: { draw: [function (u) {
          var inp = state.inp || readInputs();
          vline(u, inp.slos[s.name], COL.slo);
          vline(u, percentile(s, D.percentiles[inp.pct]), COL.pct);
        }] },
      }, [xs, ys], el));
    });
  }

  // ---- the load slider over a multi-stage run's curves (interpolated between stages) ----
  function curvePlots() {
    var cv = D.curve;
    if (!cv || !$('lg-load')) return;
    var x = cv.x, slider = $('lg-load'), lo = x[0], hi = x[x.length - 1];
    slider.min = lo; slider.max = hi; slider.step = (hi - lo) / 400 || 1;
    if (state.load === null || state.load < lo || state.load > hi) state.load = lo;
    slider.value = state.load;
    var palette = ['#1f77b4', '#9467bd', '#2ca02c', '#d62728', '#8c564b', '#e377c2'];
    var box = $('lg-curves');
    cv.groups.forEach(function (g) {
      var names = Object.keys(g.series), el = document.createElement('div');
      box.appendChild(el);
      var series = [{ label: cv.x_label, value: function (u, v) { return fmt(v, 2); } }].concat(names.map(function (n, i) {
        return { label: n, stroke: palette[i % palette.length], width: 1.5, points: { show: true, size: 6 },
          value: function (u, v) { return fmt(v, 2); } };
      }));
      plots.push(new uPlot({
        title: g.title + ' by ' + cv.x_label, width: width(box, 3), height: 230,
        scales: { x: { time: false } }, series: series, axes: [{ label: cv.x_label }, { label: g.title }],
        hooks: { draw: [function (u) { vline(u, state.load, COL.mark); }] },
      }, [x].concat(names.map(function (n) { return g.series[n]; })), el));
    });
    slider.addEventListener('input', function () { state.load = +slider.value; readLoad(); writeHash(); });
    readLoad();
  }

  function readLoad() {
    var cv = D.curve, x = cv.x, at = state.load, j = 0;
    while (j < x.length - 2 && at > x[j + 1]) j++;
    var exact = -1;
    x.forEach(function (v, i) { if (v === at) exact = i; });
    var t = exact >= 0 ? 0 : (at - x[j]) / ((x[j + 1] - x[j]) || 1);
    var a = exact >= 0 ? exact : j, b = exact >= 0 ? exact : j + 1;
    var where = exact >= 0 ? 'measured: ' + cv.names[a] :
      'interpolated (linear) between ' + cv.names[a] + ' and ' + cv.names[b];
    $('lg-load-value').textContent = cv.x_label + ' ' + fmt(at, 2) + ': ' + where;
    $('lg-load-value').dataset.value = String(at);
    var rows = ['<tr><th>figure</th><th class="r">value</th><th></th></tr>'];
    cv.groups.forEach(function (g) {
      Object.keys(g.series).forEach(function (n) {
        var ya = g.series[n][a], yb = g.series[n][b];
        var v = ya === null || yb === null ? null : ya + (yb - ya) * t;
        rows.push('<tr data-figure="' + esc(n) + '" data-value="' + (v === null ? '' : v) + '"><td>' + esc(n) +
          '</td><td class="r">' + fmt(v, 2) + '</td><td>' + (exact >= 0 ? 'measured' : 'interpolated') + '</td></tr>');
      });
    });
    $('lg-load-read').innerHTML = rows.join('');
    plots.forEach(function (u) { u.redraw(false); });
  }

  // ---- the per-request timeline (timeline.js) ----
  function timeline() {
    window.lgTimeline({ $: $, D: D, COL: COL, fmt: fmt, plots: plots,
      slos: function () { return (state.inp || readInputs()).slos; } });
  }

  readHash();
  render();
  cdfPlots();
  curvePlots();
  timeline();
  for (var press = 0; press < state.slowest && N; press++) $('lg-slowest').click();
  // The hash follows what the user changes (never at load: a link to a section keeps its anchor).
  function changed() { render(); writeHash(); }
  D.slos.forEach(function (s) { $('lg-slo-' + s.name).addEventListener('input', changed); });
  $('lg-pct').addEventListener('change', changed);
  window.addEventListener('hashchange', function () {
    if (location.hash.indexOf('=') < 0) return;  // a section's anchor, not inputs
    readHash(); render();
    if (D.curve) { $('lg-load').value = state.load; readLoad(); }
  });
  var box = $('lg-interactive');
  box.dataset.top = String(Math.round(box.getBoundingClientRect().top + window.scrollY));  // for screenshots
  box.dataset.ready = '1';
})();
