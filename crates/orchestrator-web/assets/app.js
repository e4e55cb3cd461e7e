// The dashboard's only script: live updates over Server-Sent Events, loaded as a file so a strict
// Content-Security-Policy (no inline script) holds. Every page works without it.
(function () {
  "use strict";
  // A task page while the task runs: new events are appended to the timeline as they arrive, and
  // the state in the header follows them; at the end the stream closes and the header shows the
  // final state (gates and evidence appear on the next load).
  var timeline = document.querySelector("[data-task-events]");
  if (timeline && timeline.getAttribute("data-live") === "true") {
    var url = timeline.getAttribute("data-task-events");
    var source = new EventSource(url);
    var status = document.querySelector("[data-live-status]");
    if (status) { status.textContent = "live"; }
    var state = document.querySelector("[data-state]");
    var showState = function (name) {
      if (!state || !name) { return; }
      state.setAttribute("data-state", name);
      state.className = "state state-" + name;
      state.textContent = name;
    };
    // The state an event's kind leaves the task in, where it says.
    var stateAfter = { claimed: "running", waiting: "waiting", approval_decided: "queued",
      requeued: "queued", handed_back: "queued", rescued: "queued", retried: "queued",
      succeeded: "succeeded", failed: "failed", canceled: "canceled" };
    source.addEventListener("end", function (event) {
      source.close();
      showState(event.data);
      if (status) { status.textContent = "finished"; }
      // A finished task is no longer canceled.
      document.querySelectorAll('[data-action="cancel"]').forEach(function (link) { link.remove(); });
    });
    source.onmessage = null;
    source.addEventListener("error", function () {
      if (status) { status.textContent = "reconnecting"; }
    });
    var append = function (event) {
      var data;
      try { data = JSON.parse(event.data); } catch (e) { return; }
      if (document.getElementById("event-" + data.seq)) { return; }
      var row = document.createElement("tr");
      row.id = "event-" + data.seq;
      [String(data.seq), new Date(data.at).toISOString(), data.kind, JSON.stringify(data.data)].forEach(function (text) {
        var cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      });
      timeline.appendChild(row);
      showState(stateAfter[data.kind]);
      if (status) { status.textContent = "live"; }
    };
    // Named events (the event's kind): listen for every kind the page may see.
    (timeline.getAttribute("data-kinds") || "").split(" ").forEach(function (kind) {
      if (kind) { source.addEventListener(kind, append); }
    });
  }
  // The newest page of the tasks list: every few seconds, ask whether newer tasks match the same
  // filters and say how many, with a link; the rows themselves stay where the reader left them.
  var fresh = document.querySelector("[data-new-tasks]");
  if (fresh) {
    var newest = Number(fresh.getAttribute("data-newest"));
    var poll = fresh.getAttribute("data-poll");
    var look = function () {
      fetch(poll, { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (page) {
          if (!page) { return; }
          var count = page.tasks.filter(function (task) { return task.id > newest; }).length;
          if (count > 0) {
            fresh.querySelector("[data-new-count]").textContent = String(count);
            fresh.hidden = false;
          }
        })
        .catch(function () {});
    };
    window.setInterval(look, 3000);
  }
  // The navigation's count of what waits for a person, kept current on every page.
  var badge = document.querySelector("[data-pending]");
  if (badge) {
    window.setInterval(function () {
      fetch("/api/v1/approvals?limit=1000", { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (found) {
          if (!found) { return; }
          var pending = found.approvals.length;
          badge.setAttribute("data-pending", String(pending));
          badge.textContent = String(pending);
          badge.hidden = pending === 0;
        })
        .catch(function () {});
    }, 3000);
  }
  // Forms that change something ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
})();
