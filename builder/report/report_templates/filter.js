// envbuild report: filter the grid and the cell table by arch, release (per flavor), torch, Python, GPU name, status
// and provenance
// (no dependencies).
(function () {
  var form = document.getElementById("filters");
  if (!form) { return; }
  function apply() {
    var want = {arch: form.arch.value, release: form.release.value, status: form.status.value,
                provenance: form.provenance.value, torch: form.torch.value, python: form.python.value};
    var gpu = form.gpu.value;
    var shown = 0, total = 0;
    document.querySelectorAll("#cells tbody tr, #matrix-grid a.entry").forEach(function (el) {
      var ok = ["arch", "release", "status", "provenance", "torch", "python"].every(function (k) { return !want[k] || el.dataset[k] === want[k]; })
        && (!gpu || (el.dataset.gpus || "").indexOf("|" + gpu + "|") >= 0);
      el.hidden = !ok;
      if (el.tagName === "TR") { total += 1; shown += ok ? 1 : 0; }
    });
    document.querySelectorAll("#matrix-grid tbody tr").forEach(function (row) {
      row.hidden = !row.querySelector("a.entry:not([hidden])");
    });
    document.getElementById("shown").textContent = shown + " of " + total + " cells";
  }
  form.addEventListener("change", apply);
  apply();
})();
