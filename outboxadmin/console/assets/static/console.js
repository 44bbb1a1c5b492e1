// txoutbox console: the overview's live figures and chart. It polls the
// JSON endpoint; no library, no build step.
"use strict";
(function () {
  var chart = document.getElementById("chart");
  if (!chart) return;
  var api = chart.getAttribute("data-api");
  // Poll as often as the console samples, between every second and every 5s.
  var every = Math.min(Math.max(+chart.getAttribute("data-every") || 5000, 1000), 5000);
  var SVG = "http://www.w3.org/2000/svg";

  function fmtDur(s) {
    if (s === 0) return "0s";
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return (Math.round(s * 10) / 10) + "s";
    var m = Math.floor(s / 60), r = Math.round(s % 60);
    if (m < 60) return r ? m + "m" + r + "s" : m + "m";
    return Math.floor(m / 60) + "h" + (m % 60) + "m" + r + "s";
  }
  function text(id, v) { var e = document.getElementById(id); if (e) e.textContent = v; }
  // shown escapes control and bidirectional characters and cuts a value
  // to n characters, as the server's pages do (internal/human.OneLine).
  function shown(s, n) {
    s = String(s).replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g, function (c) {
      var h = c.charCodeAt(0).toString(16);
      if (c === "\n") return "\\n";
      if (c === "\r") return "\\r";
      if (c === "\t") return "\\t";
      return c.charCodeAt(0) < 0x100 ? "\\x" + ("0" + h).slice(-2) : "\\u" + ("000" + h).slice(-4);
    });
    var cs = Array.from(s);
    return cs.length > n ? cs.slice(0, n - 1).join("") + "\u2026" : s;
  }
  // utc renders a time as the pages do: UTC, with the zone.
  function utc(t) { return new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"); }
  function el(name, attrs, parent) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function niceMax(v) {
    if (v <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v))), n = v / p;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * p;
  }

  function draw(h) {
    var w = chart.clientWidth || 800, ht = chart.clientHeight || 240;
    var L = 56, R = 56, T = 10, B = 24, pw = w - L - R, ph = ht - T - B;
    var svg = el("svg", { viewBox: "0 0 " + w + " " + ht, role: "img", "aria-label": "backlog and lag over the last hour" });
    // The x axis spans the history kept, from one minute to one hour.
    var now = h.length ? Date.parse(h[h.length - 1].at) : Date.now();
    var span = Math.min(Math.max(h.length ? now - Date.parse(h[0].at) : 0, 60 * 1000), 3600 * 1000), t0 = now - span;
    var maxB = niceMax(Math.max.apply(null, h.map(function (p) { return p.backlog; }).concat([1])));
    var maxL = niceMax(Math.max.apply(null, h.map(function (p) { return p.lag_seconds; }).concat([1])));
    for (var i = 0; i <= 4; i++) {
      var y = T + ph - ph * i / 4;
      el("line", { x1: L, x2: L + pw, y1: y, y2: y, "class": "grid" }, svg);
      el("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, svg).textContent = String(Math.round(maxB * i / 4));
      el("text", { x: L + pw + 6, y: y + 4 }, svg).textContent = fmtDur(maxL * i / 4);
    }
    for (var k = 0; k <= 4; k++) {
      var ago = span * (4 - k) / 4 / 1000;
      el("text", { x: L + pw * k / 4, y: ht - 6, "text-anchor": "middle" }, svg).textContent = k === 4 ? "now" : "-" + fmtDur(ago);
    }
    el("line", { x1: L, x2: L, y1: T, y2: T + ph, "class": "axis" }, svg);
    el("line", { x1: L, x2: L + pw, y1: T + ph, y2: T + ph, "class": "axis" }, svg);
    function series(key, max, cls) {
      var pts = h.filter(function (p) { return Date.parse(p.at) >= t0; }).map(function (p) {
        var x = L + pw * (Date.parse(p.at) - t0) / span, y = T + ph - ph * Math.min(p[key] / max, 1);
        return x.toFixed(1) + "," + y.toFixed(1);
      });
      if (pts.length === 1) pts.push(pts[0]);
      el("polyline", { points: pts.join(" "), "class": cls }, svg);
    }
    if (h.length) { series("backlog", maxB, "backlog"); series("lag_seconds", maxL, "lag"); }
    chart.replaceChildren(svg);
  }

  function topics(list) {
    var body = document.querySelector("#topics tbody");
    if (!body) return;
    var rows = list.map(function (t) {
      var tr = document.createElement("tr");
      [[shown(t.topic, 80), ""], [(t.backlog_at_least ? "≥" : "") + t.backlog, "num"], [fmtDur(t.lag_seconds), "num"],
        [(t.dead_at_least ? "≥" : "") + t.dead, "num"], [t.scheduled, "num"]].forEach(function (c) {
        var td = document.createElement("td"); td.textContent = c[0]; if (c[1]) td.className = c[1]; tr.appendChild(td);
      });
      return tr;
    });
    if (!rows.length) {
      var tr = document.createElement("tr"), td = document.createElement("td");
      td.colSpan = 4; td.className = "hint"; td.textContent = "No unpublished or dead events."; tr.appendChild(td); rows.push(tr);
    }
    body.replaceChildren.apply(body, rows);
  }

  function poll() {
    fetch(api, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (d) {
        text("backlog", (d.backlog_estimated ? "~" : "") + d.backlog);
        text("lag", fmtDur(d.lag_seconds));
        text("dead", (d.dead_estimated ? "~" : "") + d.dead);
        text("scheduled", (d.scheduled_estimated ? "~" : "") + d.scheduled);
        text("next-scheduled", d.next_scheduled ? "next due " + utc(d.next_scheduled) : "events with a later NotBefore");
        text("rate", d.publish_rate == null ? "–" : d.publish_rate.toFixed(1) + "/s");
        text("relays", d.relays_alive);
        text("updated", "counted " + utc(d.at));
        topics(d.topics);
        draw(d.history);
      })
      .catch(function (e) { text("updated", "update failed: " + e.message); });
  }
  poll();
  setInterval(poll, every);
})();
