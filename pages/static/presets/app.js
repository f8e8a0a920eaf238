/* The on-call pages work without this script. With it: pin countdowns and "ago" times tick, and the page
   notices when a chain changed elsewhere (the dashboard reloads itself; a page with a form
   says so instead, so nobody loses what they were typing). No framework, no inline code. */
(function () {
  "use strict";

  var POLL_MS = 10000;
  var body = document.body;
  var mode = body.getAttribute("data-refresh"); // "reload", "notice" or ""
  var url = body.getAttribute("data-refresh-url");

  // Browsers skip autofocus on a page opened at a #fragment (an older "Review …#choose" link):
  // the field the page means to focus still takes it, so typing goes where the page says.
  var autofocus = document.querySelector("[autofocus]");
  if (autofocus && window.location.hash && document.activeElement !== autofocus) autofocus.focus();

  // Same wording as presets.display.format_duration.
  function formatDuration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + " s";
    var minutes = Math.round(seconds / 60);
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours && minutes) return hours + " h " + minutes + " min";
    if (hours) return hours + " h";
    return minutes + " min";
  }

  function tick() {
    var now = Date.now();
    var expired = false;
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var left = (Date.parse(el.getAttribute("datetime")) - now) / 1000;
      if (left <= 0) {
        el.textContent = "expired";
        expired = true;
      } else {
        el.textContent = "expires in " + formatDuration(left);
      }
    });
    // "12 min ago" next to a change keeps counting too (same words as the server's).
    document.querySelectorAll("time[data-since]").forEach(function (el) {
      el.textContent = formatDuration((now - Date.parse(el.getAttribute("datetime"))) / 1000) + " ago";
    });
    return expired;
  }

  function isTyping() {
    var el = document.activeElement;
    return !!el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }

  function showNotice(changed) {
    var notice = document.getElementById("changed-notice");
    if (!notice) return;
    var parts = changed.map(function (doc) {
      return doc.name + " is now v" + doc.version + ": " + doc.preset + " by " + doc.updated_by;
    });
    notice.textContent = "Changed since this page was loaded: " + parts.join("; ") + ". ";
    var link = document.createElement("a");
    link.href = window.location.pathname;
    link.textContent = "Reload to see it";
    notice.appendChild(link);
  }

  var polling = false;
  function poll() {
    if (!url || !mode || polling) return;
    polling = true;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data || !data.chains) return;
        var changed = data.chains.filter(function (doc) {
          var shown = document.querySelector('[data-chain="' + CSS.escape(doc.name) + '"][data-version]');
          return shown && shown.getAttribute("data-version") !== String(doc.version);
        });
        if (!changed.length) return;
        if (mode === "reload" && !isTyping()) {
          window.location.reload();
        } else {
          showNotice(changed);
        }
      })
      .catch(function () { /* offline for a moment: try again at the next poll */ })
      .then(function () { polling = false; });
  }

  // How far each chain's live version has reached the fleet, refreshed every few seconds
  // while such a line is on the page (it moves fastest right after a change).
  var FLEET_MS = 3000;
  var fleetUrl = body.getAttribute("data-fleet-url");
  function refreshFleet() {
    if (!fleetUrl || !document.querySelector("[data-fleet]")) return;
    fetch(fleetUrl, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data || !data.chains) return;
        data.chains.forEach(function (status) {
          document.querySelectorAll('[data-fleet="' + CSS.escape(status.name) + '"]').forEach(function (el) {
            var shown = el.closest("[data-version]");
            if (shown && shown.getAttribute("data-version") !== String(status.version)) return;
            if (el.textContent !== status.summary) el.textContent = status.summary;
          });
        });
      })
      .catch(function () { /* try again at the next refresh */ });
  }
  if (fleetUrl) window.setInterval(refreshFleet, FLEET_MS);

  var wasExpired = tick();
  window.setInterval(function () {
    var expired = tick();
    // Reading the chains reverts an expired pin, so ask as soon as one runs out.
    if (expired && !wasExpired) poll();
    wasExpired = expired;
  }, 1000);
  if (url && mode) window.setInterval(poll, POLL_MS);
})();
