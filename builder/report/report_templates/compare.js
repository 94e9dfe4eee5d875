// envbuild report: compare two cells, one configuration each (profiles written by builder/report/compare.py).
// Each cell's profiles are in its own script, compare/<slug>.js, added to the page when the cell is picked
// (a <script src> works from file://, fetch does not); it calls envbuildCompare.register.
// Every value is written with textContent: data never becomes markup.
(function () {
  var form = document.getElementById("pick");
  if (!form) { return; }
  var files = JSON.parse(document.getElementById("files").textContent);  // cell key -> compare/<slug>.js
  var profiles = Object.create(null);  // cell key -> its profiles, once its script has run
  var waiting = Object.create(null);   // cell key -> what to call when its script has loaded (or failed)
  var has = function (object, key) { return Object.prototype.hasOwnProperty.call(object, key); };
  window.envbuildCompare = {register: function (entry) {
    if (entry && typeof entry.key === "string" && has(files, entry.key) && Array.isArray(entry.profiles)) {
      profiles[entry.key] = entry.profiles;
    }
  }};
  function load(key, done) {
    if (key in profiles || !has(files, key)) { done(); return; }
    if (key in waiting) { waiting[key].push(done); return; }
    waiting[key] = [done];
    var script = document.createElement("script");
    script.onload = script.onerror = function () {
      var callbacks = waiting[key];
      delete waiting[key];
      callbacks.forEach(function (f) { f(); });
    };
    script.src = files[key];
    document.body.appendChild(script);
  }
  var metrics = JSON.parse(document.getElementById("metrics").textContent);  // name -> [label with unit, kind]
  var SVG = "http://www.w3.org/2000/svg";

  function pick(key, configuration) {
    var runs = profiles[key] || [];
    for (var i = 0; i < runs.length; i++) {
      if (!configuration || runs[i].configuration === configuration) { return runs[i]; }
    }
    return runs[0];
  }
  function text(value) {
    if (value === null || value === undefined) { return "-"; }
    if (typeof value === "number" && !Number.isInteger(value)) { return Number(value.toPrecision(4)).toString(); }
    return String(value);
  }
  // a value as it reads in its unit (the same as builder/report/diff.py value_text)
  function show(name, value) {
    var kind = metrics[name] ? metrics[name][1] : "";
    if (value === null || value === undefined) { return "-"; }
    if (typeof value !== "number") { return String(value); }
    if (kind === "fraction") {
      var pct = 100 * value;
      return (pct === 0 || Math.abs(pct) >= 0.1 ? pct.toFixed(1) : Number(pct.toPrecision(2)).toString()) + "%";
    }
    if (kind === "bytes") { return (value / 1073741824).toFixed(2) + " GiB"; }
    if (kind === "usd") { return "$" + value.toFixed(4); }
    if (Number.isInteger(value)) { return value.toLocaleString("en-US"); }
    return Math.abs(value) < 1e4 ? Number(value.toPrecision(4)).toLocaleString("en-US", {maximumFractionDigits: 6})
                                 : Math.round(value).toLocaleString("en-US");
  }
  function cell(row, value, cls) {
    var td = document.createElement("td");
    td.textContent = value;
    if (cls) { td.className = cls; }
    row.appendChild(td);
  }
  function fill(section, a, b) {
    var names = Object.keys(Object.assign({}, a[section], b[section])).sort();
    var rows = names.map(function (name) {
      var va = a[section][name], vb = b[section][name];
      return {name: name, a: va, b: vb, differs: JSON.stringify(va) !== JSON.stringify(vb)};
    });
    rows.sort(function (x, y) { return (y.differs - x.differs) || (x.name < y.name ? -1 : 1); });
    var body = document.querySelector("#" + section + " tbody");
    body.textContent = "";
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.className = r.differs ? "differs" : "same";
      cell(tr, metrics[r.name] ? metrics[r.name][0] : r.name);
      cell(tr, show(r.name, r.a), "num");
      cell(tr, show(r.name, r.b), "num");
      var ratio = (typeof r.a === "number" && typeof r.b === "number" && r.a > 0 && r.differs) ? text(r.b / r.a) : "";
      cell(tr, ratio, "num");
      if (section === "probes") {  // the one table with a limit column
        var probe = r.name.split(".")[0];
        var sides = [["A", a], ["B", b]].filter(function (s) { return s[1].probe_status[probe] === "fail"; });
        var out = sides.length ? "out of limit: " + sides.map(function (s) { return s[0]; }).join(" and ") : "within";
        cell(tr, out, sides.length ? "out" : "");
      }
      body.appendChild(tr);
    });
  }
  function curves(a, b) {
    var svg = document.getElementById("curves");
    svg.textContent = "";
    var series = [[a.train_loss || [], "#0969da", "A"], [b.train_loss || [], "#cf222e", "B"]];
    var pts = series[0][0].concat(series[1][0]);
    if (!pts.length) { return; }
    var W = 720, H = 260, L = 66, R = 10, T = 10, B = 30;
    var maxX = niceMax(Math.max.apply(null, pts.map(function (p) { return p[0]; })) || 1, true);
    var maxY = niceMax(Math.max.apply(null, pts.map(function (p) { return p[1]; })) || 1, false);
    function node(name, attrs, content) {
      var el = document.createElementNS(SVG, name);
      Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
      if (content !== undefined) { el.textContent = content; }
      svg.appendChild(el);
      return el;
    }
    node("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#57606a"});
    node("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#57606a"});
    node("text", {x: (L + W) / 2, y: H - 5, "font-size": 12, "text-anchor": "middle"}, "optimizer step");
    node("text", {x: 12, y: (T + H) / 2, "font-size": 12, transform: "rotate(-90 12 " + (T + H) / 2 + ")",
                  "text-anchor": "middle"}, "training loss (nats)");
    for (var t = 0; t <= 4; t++) {  // five round ticks on each axis: 0 to a round maximum in four equal steps
      var y = H - B - (H - B - T) * t / 4, x = L + (W - L - R) * t / 4;
      node("line", {x1: L - 4, y1: y, x2: L, y2: y, stroke: "#57606a"});
      node("text", {x: L - 6, y: y + 4, "font-size": 11, "text-anchor": "end", "class": "ytick"}, tick(maxY * t / 4));
      node("line", {x1: x, y1: H - B, x2: x, y2: H - B + 4, stroke: "#57606a"});
      node("text", {x: x, y: H - B + 16, "font-size": 11, "text-anchor": "middle", "class": "xtick"}, tick(maxX * t / 4));
    }
    series.forEach(function (s, i) {
      if (!s[0].length) { return; }
      var d = s[0].map(function (p) {
        return (L + (W - L - R) * p[0] / maxX).toFixed(1) + "," + (H - B - (H - B - T) * p[1] / maxY).toFixed(1);
      }).join(" ");
      node("polyline", {points: d, fill: "none", stroke: s[1], "stroke-width": 1.5});
      node("text", {x: W - R - 40, y: T + 14 + 14 * i, "font-size": 12, fill: s[1]}, s[2]);
    });
  }
  function niceMax(value, integer) {  // the smallest 4 x (1, 2, 2.5 or 5 x 10^k) at or above value
    var raw = value / 4, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * power; }).filter(function (s) { return s >= raw; })[0];
    if (integer) { step = Math.max(1, Math.ceil(step)); }
    return step * 4;
  }
  function tick(value) { return Number(value.toPrecision(3)).toString(); }
  function presets() {  // the configurations ("preset · model") A has
    var seen = {};
    var select = form.preset, current = select.value;
    while (select.options.length > 1) { select.remove(1); }
    (profiles[form.a.value] || []).forEach(function (p) {
      if (p.configuration && !seen[p.configuration]) {
        seen[p.configuration] = true;
        var option = document.createElement("option");
        option.value = p.configuration;
        option.textContent = p.configuration;
        select.appendChild(option);
      }
    });
    select.value = seen[current] ? current : "";
  }
  function draw() {
    presets();
    var a = pick(form.a.value, form.preset.value);
    var b = pick(form.b.value, form.preset.value || (a && a.configuration));
    if (!a || !b) {  // a cell's script did not load: say so, and show nothing stale
      var missing = [form.a.value, form.b.value].filter(function (k) { return !(k in profiles); });
      document.getElementById("runs").textContent = "could not load the runs of " + missing.join(" and ") +
        " (" + missing.map(function (k) { return files[k]; }).join(", ") + ")";
      ["versions", "learning", "speed", "memory", "probes"].forEach(function (s) {
        document.querySelector("#" + s + " tbody").textContent = "";
      });
      document.getElementById("curves").textContent = "";
      return;
    }
    document.getElementById("runs").textContent =
      "A: run " + a.run_id + " (" + a.configuration + ", " + a.status + ", " + a.finished_at + ") · " +
      "B: run " + b.run_id + " (" + b.configuration + ", " + b.status + ", " + b.finished_at + ")";
    ["versions", "learning", "speed", "memory", "probes"].forEach(function (s) { fill(s, a, b); });
    curves(a, b);
  }
  function render() {  // once both cells' scripts have run; a later pick supersedes this one
    var a = form.a.value, b = form.b.value;
    load(a, function () {
      load(b, function () {
        if (form.a.value === a && form.b.value === b) { draw(); }
      });
    });
  }
  form.addEventListener("change", render);
  render();
})();
