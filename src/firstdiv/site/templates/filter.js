(function () {
  "use strict";
  var form = document.getElementById("filters");
  var fields = ["name", "workload", "since", "until"];
  var params = new URLSearchParams(window.location.search);
  fields.forEach(function (k) { if (params.get(k)) { form.elements[k].value = params.get(k); } });
  function keep(row, f, byWorkload) {
    var created = row.getAttribute("data-created");
    return (!f.name || row.getAttribute("data-name").indexOf(f.name) >= 0) &&
      (!byWorkload || !f.workload || row.getAttribute("data-workload") === f.workload) &&
      (!f.since || created >= f.since) && (!f.until || created <= f.until);
  }
  function apply() {
    var f = {};
    fields.forEach(function (k) { f[k] = form.elements[k].value.trim(); });
    f.name = f.name.toLowerCase();
    var rows = document.querySelectorAll("tr.sweep");
    var shown = 0;
    rows.forEach(function (row) { row.hidden = !keep(row, f, true); shown += row.hidden ? 0 : 1; });
    document.querySelectorAll("tr.incident").forEach(function (row) { row.hidden = !keep(row, f, false); });
    document.getElementById("count").textContent = shown + " of " + rows.length + " sweeps shown";
  }
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
  apply();
})();
