// envbuild report: filter the grid and the cell table by arch, release (per flavor), torch, Python, GPU name, status
// and provenance (no dependencies). The index comes in pages; index-cells.js holds every cell's filter values, so
// the count covers every page and the cells that match on other pages are listed with a link to their page. The
// filters travel in the address (#arch=...) from page to page.
(function () {
  var form = document.getElementById("filters");
  if (!form) { return; }
  var keys = ["arch", "release", "torch", "python", "status", "provenance"];
  var data = window.envbuildCells;
  var here = (location.pathname.match(/index-(\d+)\.html$/) || [null, "1"])[1] | 0;
  function pageName(n) { return n === 1 ? "index.html" : "index-" + n + ".html"; }
  function wanted() {
    var want = {};
    keys.concat(["gpu"]).forEach(function (k) { want[k] = form[k].value; });
    return want;
  }
  function state(want) {
    return Object.keys(want).filter(function (k) { return want[k]; }).map(function (k) {
      return k + "=" + encodeURIComponent(want[k]);
    }).join("&");
  }
  function matches(cell, want) {  // one row of index-cells.js: [key, page, arch, release, ..., [gpus], slug?]
    return keys.every(function (k, i) { return !want[k] || data.values[k][cell[2 + i]] === want[k]; })
      && (!want.gpu || cell[2 + keys.length].some(function (g) { return data.gpus[g] === want.gpu; }));
  }
  function elsewhere(want, hash) {
    var box = document.getElementById("elsewhere"), list = box.querySelector("ul");
    list.textContent = "";
    if (!data || data.pages < 2 || !hash) { box.hidden = true; return; }
    var found = data.cells.filter(function (c) { return c[1] !== here && matches(c, want); });
    found.slice(0, 500).forEach(function (c) {
      var item = document.createElement("li"), cell = document.createElement("a"), page = document.createElement("a");
      cell.href = "cells/" + (c[3 + keys.length] || c[0]) + ".html";
      cell.textContent = c[0];
      page.href = pageName(c[1]) + "#" + hash;
      page.textContent = "page " + c[1];
      item.append(cell, " (" + data.values.status[c[2 + keys.indexOf("status")]] + ", on ", page, ")");
      list.append(item);
    });
    if (found.length > 500) { list.append(document.createElement("li")); list.lastChild.textContent = "and " + (found.length - 500) + " more"; }
    box.hidden = found.length === 0;
  }
  function apply() {
    var want = wanted(), hash = state(want);
    var shown = 0, total = 0;
    document.querySelectorAll("#cells tbody tr, #matrix-grid a.entry").forEach(function (el) {
      var ok = keys.every(function (k) { return !want[k] || el.dataset[k] === want[k]; })
        && (!want.gpu || (el.dataset.gpus || "").indexOf("|" + want.gpu + "|") >= 0);
      el.hidden = !ok;
      if (el.tagName === "TR") { total += 1; shown += ok ? 1 : 0; }
    });
    document.querySelectorAll("#matrix-grid tbody tr").forEach(function (row) {
      row.hidden = !row.querySelector("a.entry:not([hidden])");
    });
    if (data) {
      total = data.cells.length;
      shown = data.cells.filter(function (c) { return matches(c, want); }).length;
    }
    document.getElementById("shown").textContent = shown + " of " + total + " cells";
    document.querySelectorAll("#pages a").forEach(function (a) {
      a.href = a.getAttribute("href").split("#")[0] + (hash ? "#" + hash : "");
    });
    elsewhere(want, hash);
  }
  location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
    var kv = pair.split("="), field = form[kv[0]];
    if (kv.length === 2 && field && field.tagName === "SELECT") { field.value = decodeURIComponent(kv[1]); }
  });
  form.addEventListener("change", apply);
  apply();
})();
