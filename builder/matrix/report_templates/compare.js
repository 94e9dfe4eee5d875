// envbuild report: compare two cells' newest runs (profiles embedded by builder/report_compare.py).
// Every value is written with textContent: data never becomes markup.
(function () {
  var form = document.getElementById("pick");
  if (!form) { return; }
  var profiles = JSON.parse(document.getElementById("profiles").textContent);
  var SVG = "http://www.w3.org/2000/svg";

  function pick(key, preset) {
    var runs = profiles[key] || [];
    for (var i = 0; i < runs.length; i++) { if (!preset || runs[i].preset === preset) { return runs[i]; } }
    return runs[0];
  }
  function text(value) {
    if (value === null || value === undefined) { return "-"; }
    if (typeof value === "number" && !Number.isInteger(value)) { return Number(value.toPrecision(4)).toString(); }
    return String(value);
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
      cell(tr, r.name);
      cell(tr, text(r.a), "num");
      cell(tr, text(r.b), "num");
      var ratio = (typeof r.a === "number" && typeof r.b === "number" && r.a > 0 && r.differs) ? text(r.b / r.a) : "";
      cell(tr, ratio, "num");
      var out = "";
      if (section === "probes") {
        var probe = r.name.split(".")[0];
        var sides = [["A", a], ["B", b]].filter(function (s) { return s[1].probe_status[probe] === "fail"; });
        out = sides.length ? "out of limit: " + sides.map(function (s) { return s[0]; }).join(" and ") : "";
      }
      cell(tr, out, out ? "out" : "");
      body.appendChild(tr);
    });
  }
  function curves(a, b) {
    var svg = document.getElementById("curves");
    svg.textContent = "";
    var series = [[a.train_loss || [], "#0969da", "A"], [b.train_loss || [], "#cf222e", "B"]];
    var pts = series[0][0].concat(series[1][0]);
    if (!pts.length) { return; }
    var W = 720, H = 260, L = 50, R = 10, T = 10, B = 30;
    var maxX = Math.max.apply(null, pts.map(function (p) { return p[0]; })) || 1;
    var maxY = Math.max.apply(null, pts.map(function (p) { return p[1]; })) || 1;
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
    node("text", {x: L - 4, y: T + 10, "font-size": 11, "text-anchor": "end"}, text(maxY));
    node("text", {x: W - R, y: H - B + 14, "font-size": 11, "text-anchor": "end"}, String(maxX));
    series.forEach(function (s, i) {
      if (!s[0].length) { return; }
      var d = s[0].map(function (p) {
        return (L + (W - L - R) * p[0] / maxX).toFixed(1) + "," + (H - B - (H - B - T) * p[1] / maxY).toFixed(1);
      }).join(" ");
      node("polyline", {points: d, fill: "none", stroke: s[1], "stroke-width": 1.5});
      node("text", {x: W - R - 40, y: T + 14 + 14 * i, "font-size": 12, fill: s[1]}, s[2]);
    });
  }
  function presets() {
    var seen = {};
    var select = form.preset, current = select.value;
    while (select.options.length > 1) { select.remove(1); }
    (profiles[form.a.value] || []).forEach(function (p) {
      if (p.preset && !seen[p.preset]) {
        seen[p.preset] = true;
        var option = document.createElement("option");
        option.value = p.preset;
        option.textContent = p.preset;
        select.appendChild(option);
      }
    });
    select.value = seen[current] ? current : "";
  }
  function render() {
    presets();
    var a = pick(form.a.value, form.preset.value);
    var b = pick(form.b.value, form.preset.value || (a && a.preset));
    if (!a || !b) { return; }
    document.getElementById("runs").textContent =
      "A: run " + a.run_id + " (" + a.preset + ", " + a.status + ", " + a.finished_at + ") · " +
      "B: run " + b.run_id + " (" + b.preset + ", " + b.status + ", " + b.finished_at + ")";
    ["versions", "throughput", "probes"].forEach(function (s) { fill(s, a, b); });
    curves(a, b);
  }
  form.addEventListener("change", render);
  render();
})();
