// memviz timeline: draws the layout computed by `tensorguard memviz --html`.
// Data: elements [size, start, end, stack, addr, initial, [t0, off0, t1, off1, ...]],
// summary [[t, bottom, top]], reserved [[t, bytes]], stacks [[frame]].
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('memviz-data').textContent);
  var palette = ['#4e79a7', '#f28e2c', '#e15759', '#76b7b2', '#59a14f',
                 '#edc949', '#af7aa1', '#ff9da7', '#9c755f', '#bab0ab'];
  var canvas = document.getElementById('memviz-canvas');
  var tip = document.getElementById('memviz-tip');
  var detail = document.getElementById('memviz-detail');
  var ctx = canvas.getContext('2d');
  var M = { left: 86, right: 36, top: 12, bottom: 36 };
  var view = { x0: 0, x1: Math.max(1, data.end) };
  var yMax = data.ymax * 1.05;
  var hover = -1;

  function fmtBytes(n) {
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    var u = 0;
    while (Math.abs(n) >= 1024 && u < units.length - 1) { n /= 1024; u++; }
    return (u === 0 ? n.toFixed(0) : n.toFixed(2)) + ' ' + units[u];
  }
  function plotW() { return canvas.clientWidth - M.left - M.right; }
  function plotH() { return canvas.clientHeight - M.top - M.bottom; }
  function X(t) { return M.left + (t - view.x0) / (view.x1 - view.x0) * plotW(); }
  function Y(b) { return M.top + plotH() - b / yMax * plotH(); }
  function invX(px) { return view.x0 + (px - M.left) / plotW() * (view.x1 - view.x0); }
  function invY(py) { return (M.top + plotH() - py) / plotH() * yMax; }

  function niceStep(range, target) {
    var raw = range / target;
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * mag >= raw) { return steps[i] * mag; } }
    return 10 * mag;
  }
  function byteStep(range, target) {
    var raw = range / target;
    var p = Math.pow(2, Math.ceil(Math.log2(Math.max(raw, 1))));
    return p;
  }

  function offsetAt(el, t) {
    var pts = el[6];
    var lo = 0, hi = pts.length / 2 - 1;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (pts[2 * mid] <= t) { lo = mid; } else { hi = mid - 1; }
    }
    return pts[2 * lo + 1];
  }

  function stepFill(series, color) {
    // series: [[t, bottom, top]] step function up to data.end
    ctx.fillStyle = color;
    for (var i = 0; i < series.length; i++) {
      var a = Math.max(series[i][0], view.x0);
      var b = Math.min(i + 1 < series.length ? series[i + 1][0] : data.end, view.x1);
      if (b <= a || series[i][2] <= series[i][1]) { continue; }
      var y1 = Y(series[i][2]), y0 = Y(series[i][1]);
      ctx.fillRect(X(a), y1, Math.max(X(b) - X(a), 0.5), y0 - y1);
    }
  }

  function draw() {
    var dpr = window.devicePixelRatio || 1;
    canvas.width = canvas.clientWidth * dpr;
    canvas.height = canvas.clientHeight * dpr;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, canvas.clientWidth, canvas.clientHeight);
    ctx.save();
    ctx.beginPath();
    ctx.rect(M.left, M.top, plotW(), plotH());
    ctx.clip();
    var els = data.elements;
    for (var k = 0; k < els.length; k++) {
      var el = els[k];
      if (el[2] <= view.x0 || el[1] >= view.x1) { continue; }
      var pts = el[6];
      ctx.fillStyle = palette[k % palette.length];
      ctx.globalAlpha = el[5] ? 0.55 : 1.0;
      for (var i = 0; i < pts.length; i += 2) {
        var a = Math.max(pts[i], view.x0);
        var b = Math.min(i + 2 < pts.length ? pts[i + 2] : el[2], el[2], view.x1);
        if (b <= a) { continue; }
        var y1 = Y(pts[i + 1] + el[0]), y0 = Y(pts[i + 1]);
        ctx.fillRect(X(a), y1, Math.max(X(b) - X(a), 0.5), Math.max(y0 - y1, 0.5));
      }
      if (k === hover) {
        ctx.globalAlpha = 1.0;
        ctx.strokeStyle = '#000';
        ctx.lineWidth = 1.5;
        for (var j = 0; j < pts.length; j += 2) {
          var c = Math.max(pts[j], view.x0);
          var d = Math.min(j + 2 < pts.length ? pts[j + 2] : el[2], el[2], view.x1);
          if (d <= c) { continue; }
          ctx.strokeRect(X(c), Y(pts[j + 1] + el[0]), X(d) - X(c), Y(pts[j + 1]) - Y(pts[j + 1] + el[0]));
        }
      }
    }
    ctx.globalAlpha = 1.0;
    stepFill(data.summary, 'rgba(120,120,120,0.45)');
    // Reserved memory as a dashed step line.
    ctx.strokeStyle = '#c00';
    ctx.setLineDash([5, 4]);
    ctx.lineWidth = 1.2;
    ctx.beginPath();
    var r = data.reserved;
    for (var q = 0; q < r.length; q++) {
      var s = Math.max(r[q][0], view.x0);
      var e = Math.min(q + 1 < r.length ? r[q + 1][0] : data.end, view.x1);
      if (e < s) { continue; }
      if (q === 0) { ctx.moveTo(X(s), Y(r[q][1])); } else { ctx.lineTo(X(s), Y(r[q][1])); }
      ctx.lineTo(X(e), Y(r[q][1]));
    }
    ctx.stroke();
    ctx.setLineDash([]);
    // Peak marker.
    ctx.strokeStyle = '#000';
    ctx.beginPath();
    ctx.moveTo(X(data.peak[0]), Y(data.peak[1]) - 8);
    ctx.lineTo(X(data.peak[0]), Y(data.peak[1]));
    ctx.stroke();
    ctx.restore();
    drawAxes();
  }

  function drawAxes() {
    ctx.fillStyle = '#222';
    ctx.strokeStyle = '#888';
    ctx.lineWidth = 1;
    ctx.font = '11px sans-serif';
    ctx.beginPath();
    ctx.moveTo(M.left, M.top);
    ctx.lineTo(M.left, M.top + plotH());
    ctx.lineTo(M.left + plotW(), M.top + plotH());
    ctx.stroke();
    var ys = byteStep(yMax, 6);
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (var v = 0; v <= yMax; v += ys) {
      ctx.fillText(fmtBytes(v), M.left - 6, Y(v));
      ctx.beginPath(); ctx.moveTo(M.left - 3, Y(v)); ctx.lineTo(M.left, Y(v)); ctx.stroke();
    }
    var xs = niceStep(view.x1 - view.x0, 10);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    for (var t = Math.ceil(view.x0 / xs) * xs; t <= view.x1; t += xs) {
      ctx.fillText(String(Math.round(t)), X(t), M.top + plotH() + 5);
      ctx.beginPath(); ctx.moveTo(X(t), M.top + plotH()); ctx.lineTo(X(t), M.top + plotH() + 3); ctx.stroke();
    }
    ctx.fillText('trace event (time step)', M.left + plotW() / 2, M.top + plotH() + 20);
  }

  function timeAt(t) {
    var ts = data.time_us;
    if (!ts.length) { return ''; }
    var lo = 0, hi = ts.length - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (ts[mid][0] <= t) { lo = mid; } else { hi = mid - 1; } }
    return ', ~' + ((ts[lo][1] - ts[0][1]) / 1e6).toFixed(3) + ' s';
  }

  function describe(k) {
    var el = data.elements[k];
    var born = el[5] ? 'before the trace' : 'event ' + el[1];
    var died = el[2] >= data.end ? 'never freed' : 'freed at event ' + el[2];
    var lines = ['0x' + el[4] + '  ' + fmtBytes(el[0]) + ' (' + el[0] + ' bytes)',
                 'allocated ' + born + ', ' + died];
    var frames = data.stacks[el[3]];
    if (!frames.length) { lines.push('  <no frames recorded>'); }
    for (var i = 0; i < frames.length; i++) { lines.push('  ' + frames[i]); }
    return lines.join('\n');
  }

  function find(t, b) {
    var els = data.elements;
    for (var k = 0; k < els.length; k++) {
      var el = els[k];
      if (t < el[1] || t >= el[2]) { continue; }
      var off = offsetAt(el, t);
      if (b >= off && b < off + el[0]) { return k; }
    }
    return -1;
  }

  function summaryAt(t) {
    var s = data.summary;
    var lo = 0, hi = s.length - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (s[mid][0] <= t) { lo = mid; } else { hi = mid - 1; } }
    return s[lo];
  }

  canvas.addEventListener('mousemove', function (ev) {
    var rect = canvas.getBoundingClientRect();
    var mx = ev.clientX - rect.left, my = ev.clientY - rect.top;
    if (drag) {
      var dt = (drag.x - mx) / plotW() * (drag.x1 - drag.x0);
      setView(drag.x0 + dt, drag.x1 + dt);
      return;
    }
    var t = invX(mx), b = invY(my);
    var k = find(t, b);
    var text = '';
    if (k >= 0) {
      text = describe(k);
    } else {
      var s = summaryAt(t);
      if (b >= s[1] && b < s[2]) {
        text = 'smaller allocations (summarized): ' + fmtBytes(s[2] - s[1]);
      }
    }
    if (k !== hover) { hover = k; draw(); }
    if (text) {
      tip.style.display = 'block';
      tip.textContent = 'event ' + Math.floor(t) + timeAt(t) + '\n' + text.split('\n').slice(0, 14).join('\n');
      tip.style.left = Math.min(mx + 14, canvas.clientWidth - 320) + 'px';
      tip.style.top = (my + 14) + 'px';
      if (k >= 0) { detail.textContent = text; }
    } else {
      tip.style.display = 'none';
    }
  });
  canvas.addEventListener('mouseleave', function () { tip.style.display = 'none'; drag = null; });

  function setView(a, b) {
    var w = b - a;
    var full = Math.max(1, data.end);
    w = Math.min(Math.max(w, 2), full);
    a = Math.min(Math.max(a, 0), full - w);
    view.x0 = a; view.x1 = a + w;
    draw();
  }
  function zoomBy(f, center) {
    var c = center === undefined ? (view.x0 + view.x1) / 2 : center;
    setView(c - (c - view.x0) * f, c + (view.x1 - c) * f);
  }
  var drag = null;
  canvas.addEventListener('mousedown', function (ev) {
    var rect = canvas.getBoundingClientRect();
    drag = { x: ev.clientX - rect.left, x0: view.x0, x1: view.x1 };
  });
  window.addEventListener('mouseup', function () { drag = null; });
  canvas.addEventListener('wheel', function (ev) {
    ev.preventDefault();
    var rect = canvas.getBoundingClientRect();
    zoomBy(ev.deltaY < 0 ? 1 / 1.25 : 1.25, invX(ev.clientX - rect.left));
  }, { passive: false });
  canvas.addEventListener('dblclick', function () { setView(0, data.end); });
  document.getElementById('zoom-in').addEventListener('click', function () { zoomBy(1 / 1.5); });
  document.getElementById('zoom-out').addEventListener('click', function () { zoomBy(1.5); });
  document.getElementById('zoom-reset').addEventListener('click', function () { setView(0, data.end); });
  window.addEventListener('resize', draw);

  var facts = document.getElementById('memviz-facts');
  for (var f = 0; f < data.facts.length; f++) {
    var span = document.createElement('span');
    span.textContent = data.facts[f];
    facts.appendChild(span);
  }
  document.getElementById('memviz-legend').innerHTML =
    '<span><i style="background:#4e79a7"></i>one allocation (largest ones, stacked in order of allocation)</span>' +
    '<span><i style="background:rgba(120,120,120,0.45)"></i>smaller allocations, summarized</span>' +
    '<span><i style="border-top:2px dashed #c00;height:0"></i>reserved (segments)</span>';

  draw();
  var status = document.getElementById('memviz-status');
  status.textContent = 'rendered ' + data.elements.length + ' allocations over ' + data.end + ' time steps';
  status.setAttribute('data-rendered', 'y' + 'es');
  document.title = 'memviz: timeline ' + 'rendered';

  // `#selftest`: hover the largest allocation and zoom once, then report
  // what happened in the DOM (used by the headless-browser check).
  if (window.location.hash === '#selftest') {
    var out = [];
    var big = -1, bigArea = -1;
    for (var z = 0; z < data.elements.length; z++) {
      var ez = data.elements[z];
      var area = ez[0] * (Math.min(ez[2], data.end) - ez[1]);
      if (area > bigArea) { big = z; bigArea = area; }
    }
    if (big >= 0) {
      var el = data.elements[big];
      var tm = (el[1] + Math.min(el[2], data.end)) / 2;
      var rect = canvas.getBoundingClientRect();
      // Mouse events carry whole pixels: aim at one and ask the page what is there.
      var px = Math.round(X(tm)), py = Math.round(Y(offsetAt(el, tm) + el[0] / 2));
      var expect = find(invX(px), invY(py));
      canvas.dispatchEvent(new MouseEvent('mousemove', {
        clientX: rect.left + px, clientY: rect.top + py, bubbles: true }));
      var want = expect >= 0 ? data.elements[expect] : null;
      var shown = want !== null && tip.style.display === 'block' &&
        tip.textContent.indexOf('0x' + want[4]) >= 0 && tip.textContent.indexOf(fmtBytes(want[0])) >= 0;
      out.push('hover ' + (shown ? 'ok' : 'FAILED') + ': ' + tip.textContent.split('\n').slice(0, 3).join(' | '));
    } else {
      out.push('hover skipped: no allocation drawn');
    }
    var before = view.x1 - view.x0;
    zoomBy(1 / 2);
    var zoomed = view.x1 - view.x0;
    setView(0, data.end);
    out.push('zoom ' + (zoomed < before || before <= 2 ? 'ok' : 'FAILED') + ': ' + before + ' -> ' + zoomed + ' time steps');
    var st = document.createElement('pre');
    st.id = 'memviz-selftest';
    st.textContent = out.join('\n');
    document.body.appendChild(st);
  }
})();
