// The dashboard's only script: live updates over Server-Sent Events, loaded as a file so a strict
// Content-Security-Policy (no inline script) holds. Every page works without it.
(function () {
  "use strict";
  // What a model or a stranger wrote, with the characters that reorder or hide text (bidi
  // controls, other format characters) and control characters written out as escapes, as the
  // daemon's own pages show them (orchestrator-types' `visible`); newlines, tabs and the
  // zero-width joiner of emoji stay.
  var visible = function (text) {
    return String(text).replace(/[\p{Cc}\p{Cf}]/gu, function (c) {
      if (c === "\n" || c === "\t" || c === "\u200d") { return c; }
      var code = c.codePointAt(0);
      return code < 0x80
        ? "\\x" + ("0" + code.toString(16)).slice(-2)
        : "\\u{" + code.toString(16) + "}";
    });
  };
  // Times: the page says how long ago, with the exact UTC time on hover; here each also gets the
  // reader's local time of day (or date, when not today), and the "ago" part is kept current.
  var relative = function (at, now) {
    var delta = now - at;
    var secs = Math.floor(Math.abs(delta) / 1000);
    var amount;
    if (secs < 5) { return "just now"; }
    if (secs < 60) { amount = secs + " s"; }
    else if (secs < 3600) { amount = Math.floor(secs / 60) + " min"; }
    else if (secs < 86400) { amount = Math.floor(secs / 3600) + " h"; }
    else if (secs < 172800) { amount = "1 day"; }
    else { amount = Math.floor(secs / 86400) + " days"; }
    return delta >= 0 ? amount + " ago" : "in " + amount;
  };
  var localText = function (at) {
    var date = new Date(at);
    var today = new Date();
    var clock = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return date.toDateString() === today.toDateString()
      ? clock
      : date.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" }) + " " + clock;
  };
  var showTime = function (element) {
    var at = Number(element.getAttribute("data-at"));
    if (!isFinite(at)) { return; }
    element.textContent = localText(at) + " · " + relative(at, Date.now());
    if (!element.title) {
      element.title = new Date(at).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    }
  };
  // `at` as the API sends it (RFC 3339) or in Unix milliseconds.
  var timeElement = function (at) {
    var ms = typeof at === "number" ? at : Date.parse(at);
    var element = document.createElement("time");
    element.setAttribute("data-at", String(ms));
    element.setAttribute("datetime", new Date(ms).toISOString());
    showTime(element);
    return element;
  };
  var showTimes = function () {
    document.querySelectorAll("time[data-at]").forEach(showTime);
  };
  showTimes();
  window.setInterval(showTimes, 30000);
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
      // Each attempt starts with its claim, under a row that names it (as the page renders it).
      if (data.kind === "claimed") {
        var attempt = String((data.data && data.data.attempt) || "");
        var header = document.createElement("tr");
        header.className = "attempt";
        // A wait for a person does not spend the attempt: it goes on.
        var resumed = timeline.querySelector('tr.attempt[data-attempt="' + attempt + '"]') !== null;
        header.setAttribute("data-attempt", attempt);
        var title = document.createElement("td");
        title.colSpan = 4;
        title.textContent = "Attempt " + attempt + (resumed ? ", resumed" : "");
        header.appendChild(title);
        timeline.appendChild(header);
      }
      var row = document.createElement("tr");
      row.id = "event-" + data.seq;
      row.setAttribute("data-tone", data.tone || "info");
      var cells = [String(data.seq), null, data.kind, data.text || (data.kind + " " + JSON.stringify(data.data))];
      cells.forEach(function (text, i) {
        var cell = document.createElement("td");
        if (i === 1) {
          cell.className = "muted";
          cell.appendChild(timeElement(data.at));
        } else {
          if (i === 2) { cell.className = "muted"; }
          cell.textContent = visible(text);
        }
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
    // The model's reply as it streams (when this daemon runs the task): shown until the whole
    // message arrives as an event.
    var reply = document.querySelector("[data-live-reply]");
    if (reply) {
      var calls = {};
      var show = function () {
        var text = reply.getAttribute("data-text") || "";
        Object.keys(calls).forEach(function (index) {
          var call = calls[index];
          text += "\n→ " + (call.name || "tool") + "(" + call.arguments + ")";
        });
        reply.textContent = visible(text);
        reply.hidden = text.length === 0;
      };
      source.addEventListener("delta", function (event) {
        var piece;
        try { piece = JSON.parse(event.data); } catch (e) { return; }
        if (typeof piece.content === "string") {
          reply.setAttribute("data-text", (reply.getAttribute("data-text") || "") + piece.content);
        } else if (piece.tool_call) {
          var call = calls[piece.tool_call.index] || { name: null, arguments: "" };
          call.name = call.name || piece.tool_call.name;
          call.arguments += piece.tool_call.arguments || "";
          calls[piece.tool_call.index] = call;
        }
        show();
      });
      source.addEventListener("retrying", function () {
        // The model is asked again from the beginning of the reply.
        reply.setAttribute("data-text", "");
        calls = {};
        show();
      });
      source.addEventListener("message", function () {
        reply.setAttribute("data-text", "");
        calls = {};
        show();
      });
    }
  }
  // A stream of changes to a list, that can be paused: `handlers` maps event names to functions
  // of the parsed data. Resuming asks for what changed since the last change seen.
  var follow = function (url, handlers, toggle) {
    var source = null;
    var last = null;
    var open = function () {
      source = new EventSource(last === null ? url : url + "?after=" + last);
      Object.keys(handlers).forEach(function (name) {
        source.addEventListener(name, function (event) {
          if (event.lastEventId) { last = event.lastEventId; }
          var data = null;
          try { data = event.data ? JSON.parse(event.data) : null; } catch (e) { return; }
          handlers[name](data);
        });
      });
    };
    open();
    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () {
        if (source) {
          source.close();
          source = null;
          toggle.textContent = "Resume live updates";
          toggle.setAttribute("data-paused", "true");
        } else {
          open();
          toggle.textContent = "Pause live updates";
          toggle.setAttribute("data-paused", "false");
          // What changed while paused is asked for once, whatever the stream replays.
          if (handlers.reset) { handlers.reset(null); }
        }
      });
    }
  };
  // The newest page of the tasks list: rows shown follow their task's state, the counts follow
  // the store, and newer tasks that match the same filters are counted, with a link, instead of
  // moving the rows under the reader's cursor.
  var fresh = document.querySelector("[data-new-tasks]");
  if (fresh) {
    var newest = Number(fresh.getAttribute("data-newest"));
    var poll = fresh.getAttribute("data-poll");
    // One question at a time; a change told meanwhile asks again when the answer is in.
    var asking = false;
    var again = false;
    var look = function () {
      if (asking) { again = true; return; }
      asking = true;
      var done = function () {
        asking = false;
        if (again) { again = false; look(); }
      };
      fetch(poll, { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (page) {
          done();
          if (!page) { return; }
          var count = page.tasks.filter(function (task) { return task.id > newest; }).length;
          if (count > 0) {
            fresh.querySelector("[data-new-count]").textContent = String(count);
            fresh.hidden = false;
          }
        })
        .catch(done);
    };
    follow("/api/v1/tasks/stream", {
      task: function (task) {
        if (!task) { return; }
        var row = document.querySelector('tr[data-task="' + task.id + '"]');
        if (row) {
          var state = row.querySelector("[data-row-state]");
          if (state) {
            state.textContent = task.state;
            state.className = "state state-" + task.state;
            state.setAttribute("data-row-state", task.state);
          }
          var attempt = row.querySelector("[data-row-attempt]");
          if (attempt) { attempt.textContent = task.attempt + "/" + task.max_attempts; }
        }
        if (task.id > newest) { look(); }
      },
      counts: function (data) {
        if (!data) { return; }
        var total = 0;
        Object.keys(data.counts).forEach(function (state) {
          total += data.counts[state];
          var cell = document.querySelector('[data-count="' + state + '"]');
          if (cell) { cell.textContent = String(data.counts[state]); }
        });
        var all = document.querySelector('[data-count="all"]');
        if (all) { all.textContent = String(total); }
      },
      reset: function () { look(); }
    }, document.querySelector("[data-live-toggle]"));
  }
  // The navigation's count of what waits for a person, kept current on every page.
  var badge = document.querySelector("[data-pending]");
  if (badge) {
    var inbox = document.querySelector("[data-inbox-new]");
    follow("/api/v1/approvals/stream", {
      pending: function (data) {
        if (!data) { return; }
        var before = Number(badge.getAttribute("data-pending"));
        badge.setAttribute("data-pending", String(data.pending));
        badge.textContent = String(data.pending);
        badge.hidden = data.pending === 0;
        // The inbox says when what it lists is no longer what waits.
        if (inbox && data.pending !== before) { inbox.hidden = false; }
      },
      approval: function () {}
    }, null);
  }
  // Forms that change something ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
})();
