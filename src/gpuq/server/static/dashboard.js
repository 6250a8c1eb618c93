// Re-fetch the server-rendered content every few seconds (the cookie authenticates it);
// a 401 reloads the page, which then shows the login form.
(function () {
  "use strict";
  var main = document.getElementById("content");
  if (!main) { return; }
  var period = parseInt(main.getAttribute("data-refresh-ms") || "0", 10);
  if (!period) { return; }
  var updated = document.getElementById("updated");
  var stale = document.getElementById("stale");
  function refresh() {
    if (document.hidden) { return; }
    fetch("dashboard/content", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) { window.location.reload(); return null; }
        if (!response.ok) { throw new Error(String(response.status)); }
        return response.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        main.innerHTML = html;
        updated.textContent = "updated " + new Date().toLocaleTimeString();
        stale.hidden = true;
      })
      .catch(function () { stale.hidden = false; });
  }
  window.setInterval(refresh, period);
})();
