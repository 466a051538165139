/* report.html's per-request timeline (interactive.js calls window.lgTimeline with what it shares).
 *
 * A line per embedded request, one row each by send time: send to first token (grey), first to
 * last token coloured by the request's TPOT (its mean ITL) against the TPOT SLO, last token to the
 * end (grey); failures in black from send to failure. Drag zooms to a box, the wheel zooms around
 * the pointer, a double-click resets; "slowest" zooms to the next of loadgen's slowest requests
 * (send to end, slowest first, as interactive_data.py ranks them). Hovering names the request.
 */
window.lgTimeline = function (lg) {
  'use strict';
  var $ = lg.$, D = lg.D, C = D.cols, N = C.id.length, COL = lg.COL, fmt = lg.fmt;
  var slowest = D.sample.slowest_rows;
  var el = $('lg-timeline');
  if (!N) { el.textContent = 'no measured request'; return; }
  var x0 = Infinity, x1 = -Infinity;
  for (var i = 0; i < N; i++) {
    x0 = Math.min(x0, C.send[i]);
    x1 = Math.max(x1, C.end[i] === null ? C.send[i] : C.end[i]);
  }
  var full = { x0: x0, x1: x1 + 1e-3, y0: -0.5, y1: N - 0.5 };
  var view = Object.assign({}, full), focus = -1, next = 0;
  function setView(v) {
    view = v;
    el.dataset.view = JSON.stringify(v);  // what is shown, for a headless browser to read
    u.setScale('x', { min: v.x0, max: v.x1 });
    u.setScale('y', { min: v.y0, max: v.y1 });
  }
  var itl = D.itl_slo;  // TPOT: the per-token SLO
  function color(i, slos) {
    if (C.status[i] !== 0) return COL.fail;
    if (!(itl in slos) || C[itl][i] === null) return COL.none;
    return C[itl][i] <= slos[itl] ? COL.ok : COL.over;
  }
  // How many requests each colour marks, on the element (data-within, -over, -none, -failed).
  function tally(slos) {
    var n = { within: 0, over: 0, none: 0, failed: 0 }, name = {};
    name[COL.ok] = 'within'; name[COL.over] = 'over'; name[COL.none] = 'none'; name[COL.fail] = 'failed';
    for (var i = 0; i < N; i++) n[name[color(i, slos)]]++;
    Object.keys(n).forEach(function (k) { el.dataset[k] = String(n[k]); });
  }
  function draw(u) {
    var ctx = u.ctx, slos = lg.slos(), dpr = devicePixelRatio;
    tally(slos);
    var lo = Math.max(0, Math.floor(view.y0)), hi = Math.min(N - 1, Math.ceil(view.y1));
    var rowPx = u.bbox.height / Math.max(1, view.y1 - view.y0);
    var lw = Math.max(1, Math.min(6 * dpr, rowPx * 0.7));
    ctx.save();
    ctx.beginPath(); ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height); ctx.clip();
    ctx.lineWidth = lw;
    function seg(a, b, y, c) {
      if (a === null || b === null || b < view.x0 || a > view.x1) return;
      ctx.strokeStyle = c; ctx.beginPath();
      ctx.moveTo(u.valToPos(a, 'x', true), y); ctx.lineTo(Math.max(u.valToPos(b, 'x', true), u.valToPos(a, 'x', true) + 1), y);
      ctx.stroke();
    }
    for (var i = lo; i <= hi; i++) {
      var y = u.valToPos(i, 'y', true), first = C.first[i], last = C.last[i] === null ? first : C.last[i];
      if (C.status[i] !== 0) { seg(C.send[i], C.end[i] === null ? C.send[i] : C.end[i], y, COL.fail); continue; }
      seg(C.send[i], first, y, COL.wait);
      seg(first, last, y, color(i, slos));
      seg(last, C.end[i], y, COL.wait);
    }
    if (focus >= 0) {
      var fy = u.valToPos(focus, 'y', true);
      ctx.strokeStyle = COL.mark; ctx.lineWidth = 1.5 * dpr; ctx.setLineDash([4, 3]);
      ctx.strokeRect(u.valToPos(C.send[focus], 'x', true) - 3 * dpr, fy - lw - 2 * dpr,
        u.valToPos(C.end[focus] === null ? C.send[focus] : C.end[focus], 'x', true) - u.valToPos(C.send[focus], 'x', true) + 6 * dpr,
        2 * lw + 4 * dpr);
    }
    ctx.restore();
  }
  function describe(i) {
    var st = D.stages[String(C.stage[i])];
    return 'request ' + C.id[i] + (st ? ' (stage ' + C.stage[i] + ', ' + st + ')' : '') + ': sent at ' +
      fmt(C.send[i], 1) + ' ms, TTFT ' + fmt(C.ttft_ms[i], 2) + ', TPOT ' + fmt(C.tpot_ms[i], 2) +
      ', E2E ' + fmt(C.e2e_ms[i], 2) + ' ms, ' + (C.prompt[i] === null ? '-' : C.prompt[i]) + ' prompt / ' +
      (C.output[i] === null ? '-' : C.output[i]) + ' output tokens, ' + (C.status[i] === 0 ? 'ok' : (C.error[i] || 'failed'));
  }
  var u = new uPlot({
    width: Math.max(640, Math.min(el.parentNode.clientWidth || 1100, 1140)), height: 360,
    scales: { x: { time: false, auto: false, range: function () { return [view.x0, view.x1]; } },
      y: { auto: false, dir: -1, range: function () { return [view.y0, view.y1]; } } },
    series: [{ label: 'ms from the window start', value: function (u, v) { return fmt(v, 1); } },
      { label: 'request (by send time)', scale: 'y', stroke: 'transparent', points: { show: false },
        value: function (u, v) { return fmt(v, 0); } }],
    axes: [{ label: 'ms from the start of the measured window' }, { scale: 'y', label: 'request, by send time' }],
    legend: { show: false },
    cursor: { drag: { x: true, y: true, uni: 20, setScale: false }, points: { show: false },
      bind: { dblclick: function () { return function () { focus = -1; setView(Object.assign({}, full)); return null; }; } } },
    hooks: {
      draw: [draw],
      setSelect: [function (u) {
        var s = u.select;
        if (s.width < 3 && s.height < 3) return;
        var nx0 = s.width >= 3 ? u.posToVal(s.left, 'x') : view.x0, nx1 = s.width >= 3 ? u.posToVal(s.left + s.width, 'x') : view.x1;
        var ya = u.posToVal(s.top, 'y'), yb = u.posToVal(s.top + s.height, 'y');
        var ny0 = s.height >= 3 ? Math.min(ya, yb) : view.y0, ny1 = s.height >= 3 ? Math.max(ya, yb) : view.y1;
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
        setView({ x0: nx0, x1: nx1, y0: ny0, y1: ny1 });
      }],
      setCursor: [function (u) {
        var c = u.cursor;
        if (c.left === null || c.left < 0) return;
        var row = Math.round(u.posToVal(c.top, 'y'));
        var hover = $('lg-hover');
        if (row < 0 || row >= N) { hover.textContent = '\u00a0'; return; }
        hover.textContent = fmt(u.posToVal(c.left, 'x'), 1) + ' ms; ' + describe(row);
        hover.dataset.row = String(row);
      }],
    },
  }, [[full.x0, full.x1], [full.y0, full.y1]], el);
  lg.plots.push(u);
  el.dataset.view = JSON.stringify(view);
  u.over.addEventListener('wheel', function (e) {
    e.preventDefault();
    var k = e.deltaY > 0 ? 1.25 : 0.8, r = u.over.getBoundingClientRect();
    var cx = u.posToVal(e.clientX - r.left, 'x'), cy = u.posToVal(e.clientY - r.top, 'y');
    setView({ x0: cx - (cx - view.x0) * k, x1: cx + (view.x1 - cx) * k,
      y0: cy - (cy - view.y0) * k, y1: cy + (view.y1 - cy) * k });
  }, { passive: false });
  $('lg-reset').addEventListener('click', function () { focus = -1; setView(Object.assign({}, full)); });
  $('lg-slowest').addEventListener('click', function () {
    var i = slowest[next % slowest.length], end = C.end[i] === null ? C.send[i] : C.end[i], pad = (end - C.send[i]) * 0.15 + 1;
    focus = i;
    setView({ x0: C.send[i] - pad, x1: end + pad, y0: Math.max(-0.5, i - 15), y1: Math.min(N - 0.5, i + 15) });
    $('lg-hover').textContent = 'slowest ' + (next % slowest.length + 1) + ' of ' + slowest.length + ': ' + describe(i);
    $('lg-hover').dataset.row = String(i);
    $('lg-slowest').dataset.shown = String(C.id[i]);
    next++;
  });
};
