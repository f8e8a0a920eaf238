/* The on-call pages work without this script. With it: pin countdowns and "ago" times tick, the page
   notices when a chain changed elsewhere (the dashboard reloads itself; a page with a form
   says so instead, so nobody loses what they were typing), and planned pins' times show on the
   browser's clock too. No framework, no inline code. */
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
    // A drill's window: "ends in 12 min", then "ended" (the server's ends_in).
    document.querySelectorAll("time[data-ends]").forEach(function (el) {
      var left = (Date.parse(el.getAttribute("datetime")) - now) / 1000;
      el.textContent = left <= 0 ? "ended" : "ends in " + formatDuration(left);
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

  // --- planned pins: times on the browser's clock too ----------------------------------------
  // The server writes every time in UTC; a plan's start and end are also shown on the browser's
  // own clock, and its form may read the times typed on that clock ("Times are in").
  var browserZone = "";
  try {
    browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch (error) { /* an old browser: UTC only, as without this script */ }
  var showsLocal = !!browserZone && !/^(Etc\/)?(UTC|UCT|GMT|GMT[+-]?0|Universal|Zulu|Greenwich)$/.test(browserZone);

  function two(n) { return (n < 10 ? "0" : "") + n; }

  // "Sun 14 Mar 01:00 EST", the year too when it is not this one: pages.display.format_day's
  // words, on the clock of `zone`.
  function formatDay(date, zone) {
    var parts = {};
    new Intl.DateTimeFormat("en-US", {
      timeZone: zone, weekday: "short", day: "2-digit", month: "short", year: "numeric",
      hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "short"
    }).formatToParts(date).forEach(function (part) { parts[part.type] = part.value; });
    var thisYear = new Intl.DateTimeFormat("en-US", { timeZone: zone, year: "numeric" }).format(new Date());
    var year = parts.year !== thisYear ? " " + parts.year : "";
    return parts.weekday + " " + parts.day + " " + parts.month + year + " " + parts.hour + ":" + parts.minute + " " + parts.timeZoneName;
  }

  function fillLocal() {
    if (!showsLocal) return;
    document.querySelectorAll("[data-local]").forEach(function (el) {
      var when = new Date(el.getAttribute("data-local"));
      if (isNaN(when.getTime())) return;
      var prefix = el.getAttribute("data-local-prefix");
      // Its space is its own: a place right before a colon stays empty without the script.
      el.textContent = " (" + (prefix || "") + formatDay(when, browserZone) + ")";
    });
  }
  fillLocal();

  // A datetime-local input's value, read on the clock of `zone` (UTC or this browser's): a
  // Date, "gap" when that clock skips it (the clocks go forward), or null.
  function instantOf(text, zone) {
    var m = /^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d)(?::(\d\d))?$/.exec(text.trim());
    if (!m) return null;
    var p = m.slice(1).map(function (value) { return value === undefined ? 0 : Number(value); });
    if (zone === "UTC") return new Date(Date.UTC(p[0], p[1] - 1, p[2], p[3], p[4], p[5]));
    if (zone !== browserZone) return null;
    var date = new Date(p[0], p[1] - 1, p[2], p[3], p[4], p[5]);
    if (date.getDate() !== p[2] || date.getHours() !== p[3] || date.getMinutes() !== p[4]) return "gap";
    return date;
  }

  // A Date as a datetime-local input shows it, on this browser's clock.
  function wallOf(date) {
    return date.getFullYear() + "-" + two(date.getMonth() + 1) + "-" + two(date.getDate()) + "T" +
      two(date.getHours()) + ":" + two(date.getMinutes()) + (date.getSeconds() ? ":" + two(date.getSeconds()) : "");
  }

  document.querySelectorAll("form[data-plan-times]").forEach(function (form) {
    var zone = form.querySelector('select[name="zone"]');
    var start = form.querySelector('input[name="starts_at"]');
    var end = form.querySelector('input[name="ends_at"]'); // a drill's form has a start only
    var preview = form.querySelector("[data-zone-preview]");
    if (!zone || !start) return;
    if (showsLocal && !Array.prototype.some.call(zone.options, function (o) { return o.value === browserZone; })) {
      zone.add(new Option(browserZone + " (this browser)", browserZone));
    }
    // A fresh form reads times on this browser's clock (a plan's times shown on it); one sent
    // back with an error keeps the clock it was sent with.
    if (showsLocal && form.hasAttribute("data-unbound")) {
      zone.value = browserZone;
      [start, end].forEach(function (input) {
        var instant = input && input.getAttribute("data-instant");
        if (instant) input.value = wallOf(new Date(instant));
      });
    }
    function update() {
      form.querySelectorAll("[data-zone-name]").forEach(function (el) { el.textContent = "in " + zone.value; });
      if (!preview) return;
      var other = zone.value === "UTC" ? (showsLocal ? browserZone : "") : "UTC";
      var from = instantOf(start.value, zone.value);
      var to = end ? instantOf(end.value, zone.value) : null;
      var words = [];
      [["Start", start, from], ["End", end, to]].forEach(function (field) {
        if (field[2] === "gap") {
          words.push(field[0] + " " + field[1].value.slice(11, 16) + " does not exist in " + zone.value + ": the clocks go forward then.");
        }
      });
      if (!words.length && other && from instanceof Date) {
        var line = "In " + other + ": " + formatDay(from, other);
        if (to instanceof Date) {
          line += " to " + formatDay(to, other);
          if (to > from) line += " (" + formatDuration((to - from) / 1000) + ")";
        }
        words.push(line + ".");
      }
      preview.textContent = words.join(" ");
    }
    zone.addEventListener("change", update);
    [start, end].forEach(function (input) {
      if (!input) return;
      input.addEventListener("input", update);
      input.addEventListener("change", update);
    });
    update();
  });

  // --- a drill's report: live until it is judged ------------------------------------------------
  // The page is fetched again every few seconds and each part marked data-live-part replaced by
  // its new self (gone from the new page: emptied). A part someone is typing in, or has typed
  // in, is left as it is. Once the new page is no longer live (judged), so is this one.
  var report = document.querySelector("[data-drill-report][data-live-every]");
  if (report) {
    var every = Number(report.getAttribute("data-live-every")) || 5000;
    var drillId = report.getAttribute("data-drill-report");
    var fetching = false;
    var typedIn = function (part) {
      if (part.contains(document.activeElement) && document.activeElement !== part) return true;
      return Array.prototype.some.call(part.querySelectorAll("input, textarea"), function (input) {
        return input.type !== "hidden" && input.value !== input.defaultValue;
      });
    };
    var follow = window.setInterval(function () {
      if (fetching) return;
      fetching = true;
      fetch(window.location.pathname, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, "text/html");
          var freshReport = fresh.querySelector("[data-drill-report]");
          // Signed out meanwhile (the sign-in page), or another page: leave this one as it is.
          if (!freshReport || freshReport.getAttribute("data-drill-report") !== drillId) return;
          document.querySelectorAll("[data-live-part][id]").forEach(function (part) {
            if (typedIn(part)) return;
            var next = fresh.getElementById(part.id);
            if (next) part.replaceWith(document.importNode(next, true));
            else part.replaceChildren();
          });
          if (!freshReport.hasAttribute("data-live-every")) {
            report.removeAttribute("data-live-every");
            window.clearInterval(follow);
          }
          fillLocal();
          tick();
        })
        .catch(function () { /* offline for a moment: try again at the next refresh */ })
        .then(function () { fetching = false; });
    }, every);
  }

  var wasExpired = tick();
  window.setInterval(function () {
    var expired = tick();
    // Reading the chains reverts an expired pin, so ask as soon as one runs out.
    if (expired && !wasExpired) poll();
    wasExpired = expired;
  }, 1000);
  if (url && mode) window.setInterval(poll, POLL_MS);
})();
