/* Cedarberg console, Audit trail: new lines appear at the top as they are written.
 *
 * Progressive enhancement: without this script the page works as it is (its "Newer lines" link).
 * It follows the audit log with the page's follow token: one long-polling request at a time to
 * /console/audit/follow (the same filters; the server waits up to data-wait seconds for a line),
 * inserts the rows the server rendered at the top and says how many arrived in an aria-live
 * region. Bounded: at most data-keep rows stay in the page (the oldest go), errors back off from
 * 1 s to 60 s (a 429's Retry-After is honoured), nothing is requested while the tab is hidden,
 * and a session that ended stops it.
 */
(function () {
  "use strict";

  var table = document.getElementById("audit-lines");
  if (!table || !window.fetch || !window.AbortController) {
    return;
  }
  var body = table.tBodies[0];
  var live = document.getElementById("audit-live");
  var base = table.getAttribute("data-follow");
  var after = table.getAttribute("data-after");
  var keep = parseInt(table.getAttribute("data-keep"), 10) || 500;
  var wait = parseInt(table.getAttribute("data-wait"), 10) || 25;
  var MIN_DELAY = 1000;
  var MAX_DELAY = 60000;
  var delay = 0;
  var timer = null;
  var controller = null;
  var ended = false;

  function say(text) {
    if (live) {
      live.textContent = text;
    }
  }

  function followUrl() {
    var glue = base.indexOf("?") >= 0 ? "&" : "?";
    return base + glue + "after=" + encodeURIComponent(after) + "&wait=" + wait;
  }

  function newerLink() {
    var newer = document.getElementById("audit-newer");
    if (newer) {
      var glue = base.indexOf("?") >= 0 ? "&" : "?";
      newer.href = base.replace("/console/audit/follow", "/console/audit") + glue + "after=" + encodeURIComponent(after);
    }
  }

  function insert(html, count) {
    var template = document.createElement("template");
    template.innerHTML = html;
    var rows = template.content.querySelectorAll("tr");
    var fragment = document.createDocumentFragment();
    for (var i = 0; i < rows.length; i++) {
      rows[i].className = "fresh";
      fragment.appendChild(rows[i]);
    }
    body.insertBefore(fragment, body.firstChild);
    var empty = document.getElementById("audit-empty");
    if (empty) {
      empty.remove();
    }
    var trimmed = false;
    while (body.rows.length > keep) {
      body.deleteRow(-1);
      trimmed = true;
    }
    var older = document.getElementById("audit-older");
    if (trimmed && older) {
      older.remove(); /* its page starts below the lines let go: page back from the newest instead */
    }
    say(count === 1 ? "1 new line" : count + " new lines");
  }

  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  function backOff(retryAfter) {
    delay = Math.min(MAX_DELAY, Math.max(MIN_DELAY, delay * 2));
    if (retryAfter > 0) {
      delay = Math.min(MAX_DELAY, Math.max(delay, retryAfter * 1000));
    }
    say("Following paused; trying again in " + Math.round(delay / 1000) + " s.");
    schedule(delay);
  }

  function poll() {
    timer = null;
    if (ended || controller || document.visibilityState !== "visible") {
      return;
    }
    controller = new AbortController();
    var mine = controller;
    fetch(followUrl(), {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Accept": "application/json" },
      signal: mine.signal
    }).then(function (response) {
      if (response.status === 401) {
        ended = true;
        say("Your session has ended: sign in again to go on following.");
        return null;
      }
      if (!response.ok) {
        backOff(parseInt(response.headers.get("Retry-After") || "0", 10));
        return null;
      }
      return response.json().then(function (data) {
        after = data["follow-token"];
        newerLink();
        if (data.count > 0) {
          insert(data.html, data.count);
        }
        delay = 0;
        schedule(0);
      });
    }).catch(function () {
      if (!mine.signal.aborted) {
        backOff(0);
      }
    }).then(function () {
      if (controller === mine) {
        controller = null;
      }
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") {
      schedule(0);
    } else {
      clearTimeout(timer);
      timer = null;
      if (controller) {
        controller.abort();
        controller = null;
      }
    }
  });

  schedule(0);
}());
