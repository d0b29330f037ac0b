// Moldau console: re-reads the page's live part (#live) every data-refresh seconds while the page is visible and
// swaps it in; the server renders that part alone when asked with the header X-Console-Live.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) return;
  var every = (Number(live.dataset.refresh) || 5) * 1000;
  var status = document.getElementById("refresh-status");
  var busy = false;

  function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(location.href, {headers: {"X-Console-Live": "1"}, cache: "no-store", credentials: "same-origin"})
      .then(function (response) {
        return response.text().then(function (html) {
          live.innerHTML = html;
          live.dataset.refreshed = String(Date.now());
          if (status) status.textContent = (response.ok ? "updated " : "error at ") + new Date().toLocaleTimeString();
        });
      })
      .catch(function () {
        if (status) status.textContent = "the console does not answer (" + new Date().toLocaleTimeString() + ")";
      })
      .then(function () { busy = false; });
  }

  setInterval(refresh, every);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
})();
